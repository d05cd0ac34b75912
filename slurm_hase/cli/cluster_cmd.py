"""`hase cluster`: a real local heterogeneous Slurm cluster for tests and demos."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from slurm_hase.errors import ClusterError
from slurm_hase.files import replace_whole
from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.localcluster.paths import cluster_paths
from slurm_hase.slurm.localcluster.spec import load_spec

spec_option = click.option(
    "--spec", "spec_path", type=click.Path(dir_okay=False), default=None,
    help="Cluster spec (TOML). Default: 3 GPU types x 2 nodes x 4 GPUs, MPS, 2 accounts "
         "(status and down: the spec the last 'up' of this --dir was given).")
dir_option = click.option(
    "--dir", "root", type=click.Path(file_okay=False), default=None, envvar="HASE_CLUSTER_DIR",
    help="Where configs, state and logs live [env HASE_CLUSTER_DIR; /var/lib/slurm-hase/cluster].")


SAVED_SPEC = "hase-cluster-spec.toml"  # in the cluster's etc/: the spec its last `up` used


def _cluster(spec_path: str | None, root: str | None, *, saved: bool = False) -> LocalCluster:
    """The cluster of `--spec` (None: the default spec; with `saved`, the spec the last `up`
    of this folder was given, where it saved one) under `--dir`."""
    paths = cluster_paths(root)
    if spec_path is None and saved and (paths.etc / SAVED_SPEC).is_file():
        spec_path = str(paths.etc / SAVED_SPEC)
    return LocalCluster(load_spec(spec_path), paths)


def _save_spec(lc: LocalCluster, spec_path: str | None) -> None:
    """Keep the spec `up` used beside its configs, so `status` and `down` without --spec read
    the same nodes (none saved for the default spec)."""
    saved = lc.paths.etc / SAVED_SPEC
    if spec_path is None:
        saved.unlink(missing_ok=True)
    else:
        saved.parent.mkdir(parents=True, exist_ok=True)
        replace_whole(saved, Path(spec_path).read_text(encoding="utf-8"), mode=0o644)


@click.group()
def cluster() -> None:
    """Run a real Slurm cluster on this host: slurmctld, one slurmd per node with fake GPUs,
    slurmdbd with MariaDB, and munge, on private ports. Needs root and Debian's slurm-wlm,
    slurmdbd, munge and mariadb-server packages.

    \b
      hase cluster up            # start (idempotent), wait until every node is idle
      eval "$(hase cluster env)" # point sbatch/squeue/sacct at it
      hase cluster down          # stop exactly what 'up' started
    """


@cluster.command()
@spec_option
@dir_option
@click.option("--timeout", type=click.FloatRange(min=1.0), default=90.0, show_default=True,
              envvar="HASE_CLUSTER_TIMEOUT", show_envvar=True,
              help="Seconds to wait for readiness (a slow first start, creating the "
                   "accounting database on a slow disk, may need more).")
def up(spec_path: str | None, root: str | None, timeout: float) -> None:
    """Start the cluster and wait until all nodes are idle and sacct answers.

    \b
    Examples:
      hase cluster up                      # a100-[1-2], v100-[1-2], t4-[1-2]
      hase cluster up --spec my-cluster.toml --dir /tmp/hase-cluster
      eval "$(hase cluster env)" && sinfo -o "%N %G %f"
    """
    lc = _cluster(spec_path, root)
    status = lc.up(progress=lambda msg: click.echo(f"cluster: {msg}", err=True), timeout_s=timeout)
    _save_spec(lc, spec_path)
    click.echo(f"cluster up: {len(status.node_states)} nodes, accounting ok. "
               f"Use: export SLURM_CONF={status.slurm_conf}")


@cluster.command()
@spec_option
@dir_option
def down(spec_path: str | None, root: str | None) -> None:
    """Stop every process that 'up' started (and nothing else).

    \b
    Examples:
      hase cluster down
      hase cluster down --dir /tmp/hase-cluster   # the cluster started with that --dir
    """
    stopped = _cluster(spec_path, root, saved=True).down(
        progress=lambda m: click.echo(f"cluster: {m}", err=True))
    click.echo(f"stopped {len(stopped)} processes" if stopped else "cluster was not running")


@cluster.command()
@spec_option
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(spec_path: str | None, root: str | None, as_json: bool) -> None:
    """Show processes, node states and accounting; exit 1 unless ready.

    \b
    Examples:
      hase cluster status
      hase cluster status --json || hase cluster up   # start it unless it is ready
    """
    st = _cluster(spec_path, root, saved=True).status()
    if as_json:
        click.echo(json.dumps({"ready": st.ready, "root": st.root, "slurm_conf": st.slurm_conf,
                               "processes": st.processes, "not_running": st.missing,
                               "nodes": st.node_states,
                               "accounting": st.accounting}, indent=2))
    else:
        click.echo(f"root:       {st.root}\nSLURM_CONF: {st.slurm_conf}")
        click.echo(f"processes:  {', '.join(sorted(st.processes)) or 'none'}")
        if st.missing:
            click.echo(f"not running: {', '.join(st.missing)}")
        for node, state in sorted(st.node_states.items()):
            click.echo(f"  {node:12s} {state}")
        click.echo(f"accounting: {'ok' if st.accounting else 'not answering'}")
        click.echo(f"ready:      {'yes' if st.ready else 'no'}")
    raise SystemExit(0 if st.ready else 1)


@cluster.command()
@dir_option
def env(root: str | None) -> None:
    """Print the export line for SLURM_CONF (use: eval "$(hase cluster env)"); exit 1 when
    there is no cluster there (its slurm.conf is missing).

    \b
    Examples:
      eval "$(hase cluster env)"           # then sinfo, sbatch, hsbatch use the local cluster
      eval "$(hase cluster env --dir /tmp/hase-cluster)"
    """
    paths = cluster_paths(root)
    if not paths.slurm_conf.is_file():
        where = f" --dir {shlex.quote(str(paths.root))}" if root else ""
        raise ClusterError(f"no cluster at {paths.root}: {paths.slurm_conf} does not exist; "
                           f"start one with 'hase cluster up{where}'")
    click.echo(f"export SLURM_CONF={shlex.quote(str(paths.slurm_conf))}")
