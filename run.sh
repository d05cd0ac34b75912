#!/usr/bin/env bash
# slurm-hase developer entry point. As root on Debian 12 or 13:
#   ./run.sh demo   install everything, start the local Slurm cluster, run the demo
#   ./run.sh test   install everything, start the local Slurm cluster, run lint + all tests
#   ./run.sh setup  install only;  ./run.sh down  stop the local cluster
#   ./run.sh test-in trixie|bookworm   the same tests in a Debian 13 (Slurm 24.11) or 12 (22.05)
#                   root made with debootstrap (CI runs the other release than the host's)
set -euo pipefail
cd "$(dirname "$0")"
VENV=${HASE_VENV:-.venv}
APT_PACKAGES="slurm-wlm slurmdbd munge mariadb-server mariadb-client libslurm-dev gcc libc6-dev make python3-venv python3-dev shellcheck systemd tzdata"

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

# The same `test` inside a root of another Debian release, so the live tests also run against the
# other Slurm (bookworm: 22.05, trixie: 24.11). The root is made once with debootstrap under
# $HASE_ROOTS_DIR; the checkout (tracked and untracked, not ignored, files) is copied in afresh
# and ../shared is mounted read-only beside it. The host's cluster is stopped first (same ports).
test_in() (
  local suite=${1:-} root mirror=${HASE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  case "$suite" in bookworm|trixie) ;; *) echo "usage: $0 test-in bookworm|trixie" >&2; exit 2 ;; esac
  root=${HASE_ROOTS_DIR:-/var/lib/slurm-hase/roots}/$suite
  if [ -x "$VENV/bin/hase" ]; then "$VENV/bin/hase" cluster down >/dev/null 2>&1 || true; fi
  if [ ! -f "$root/.hase-root-complete" ]; then
    # a root left half-made (debootstrap interrupted) is made again, but never while anything
    # is mounted inside it (rm -rf would go through a bind mount into the host)
    if [ -e "$root" ]; then
      if grep -q " $root/" /proc/mounts; then
        echo "test-in: $root is incomplete and has mounts inside; unmount them first" >&2; exit 1
      fi
      rm -rf "$root"
    fi
    if ! command -v debootstrap >/dev/null; then
      log "apt-get install debootstrap"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    fi
    log "debootstrap $suite into $root (once; a few minutes)"
    mkdir -p "$root"
    debootstrap --variant=minbase --include="$(echo "$APT_PACKAGES" git ca-certificates procps | tr ' ' ,)" \
      "$suite" "$root" "$mirror" >/dev/null
    touch "$root/.hase-root-complete"
  fi
  # what apt and pip need on this network (a proxy's CA, a package mirror) carries over
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"; fi
  if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$root/etc/pip.conf"; fi
  local src="$root/src/slurm-hase"
  rm -rf "$src" && mkdir -p "$src" "$root/src/shared"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$src"
  else
    tar --exclude=./.venv --exclude=./.git -cf - . | tar -xf - -C "$src"
  fi
  local mounted=()
  cleanup() {
    chroot "$root" /opt/hase-venv/bin/hase cluster down >/dev/null 2>&1 || true
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" || umount -l "${mounted[i]}"; done
  }
  trap cleanup EXIT
  for d in proc sys dev dev/pts; do
    if ! mountpoint -q "$root/$d"; then mount --bind "/$d" "$root/$d"; mounted+=("$root/$d"); fi
  done
  if [ -d ../shared ] && ! mountpoint -q "$root/src/shared"; then
    mount --bind ../shared "$root/src/shared" && mount -o remount,bind,ro "$root/src/shared"
    mounted+=("$root/src/shared")
  fi
  log "tests in Debian $suite ($(chroot "$root" slurmctld -V))"
  chroot "$root" /usr/bin/env HASE_VENV=/opt/hase-venv HOME=/root \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c 'cd /src/slurm-hase && ./run.sh test "$@"' test-in "${@:2}"
)

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
  test-in) test_in "${@:2}" ;;
  down) "$VENV/bin/hase" cluster down ;;
  *) echo "usage: $0 demo|test|test-in|setup|down" >&2; exit 2 ;;
esac
