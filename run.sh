#!/usr/bin/env bash
# slurm-hase developer entry point. As root on Debian 12 or 13:
#   ./run.sh demo   install everything, start the local Slurm cluster, run the demo
#   ./run.sh test   install everything, start the local Slurm cluster, run lint + all tests
#   ./run.sh setup  install only;  ./run.sh down  stop the local cluster
set -euo pipefail
cd "$(dirname "$0")"
VENV=${HASE_VENV:-.venv}
APT_PACKAGES="slurm-wlm slurmdbd munge mariadb-server mariadb-client libslurm-dev gcc make python3-venv"

log() { printf '\n==> %s\n' "$*" >&2; }

install_system() {
  local missing=()
  for pkg in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # Debian's packages start system daemons on install; the project runs its own private ones.
}

install_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating virtualenv $VENV"
    python3 -m venv "$VENV"
  fi
  log "pip install -e .[dev,plot]"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --config-settings editable_mode=compat -e '.[dev,plot]'
  # An editable install is not byte-compiled (a regular pip install is): compile once so the
  # commands start as fast as installed ones (hsbatch's start-up budget).
  "$VENV/bin/python" -m compileall -q -j 0 slurm_hase
}

build_spank() {
  if [ -f spank/Makefile ]; then
    log "building the SPANK plugin"
    make -s -C spank
  fi
}

setup() { install_system; install_python; build_spank; }

lint() {
  log "ruff, mypy, import-linter"
  "$VENV/bin/ruff" check slurm_hase tests bench
  "$VENV/bin/mypy" slurm_hase
  "$VENV/bin/lint-imports"
}

cluster_up() {
  log "starting the local Slurm cluster"
  "$VENV/bin/hase" cluster up
}

case "${1:-}" in
  setup) setup ;;
  demo)
    setup; cluster_up
    log "demo"
    "$VENV/bin/python" -m slurm_hase.cli.demo
    ;;
  test)
    setup; lint; cluster_up
    log "pytest (unit + real-cluster integration tests)"
    HASE_REQUIRE_CLUSTER=1 "$VENV/bin/pytest" -q -p no:cacheprovider tests "${@:2}"
    ;;
  down) "$VENV/bin/hase" cluster down ;;
  *) echo "usage: $0 demo|test|setup|down" >&2; exit 2 ;;
esac
