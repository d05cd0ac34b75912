"""`hase`: the admin and user command group. Subcommands load lazily so `hase --help` is fast."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from slurm_hase.errors import HaseError

# name -> (module, attribute, one-line help). Each module owns its own click command/group.
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "cluster": ("slurm_hase.cli.cluster_cmd", "cluster", "Start/stop the local test Slurm cluster."),
    "model": ("slurm_hase.cli.model_cmd", "model", "Train, evaluate and query the predictor."),
    "simulate": ("slurm_hase.cli.sim_cmd", "simulate", "Replay a real trace through a policy."),
    "schedd": ("slurm_hase.cli.schedd_cmd", "schedd", "Run and manage the scheduler daemon."),
    "report": ("slurm_hase.cli.report_cmd", "report", "Fairness and usage reports from sacct."),
    "gpu": ("slurm_hase.cli.gpu_cmd", "gpu", "Probe this node's real GPUs (pynvml); render the MPS prolog/epilog."),
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr, short_help = entry
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            return _unavailable(cmd_name, short_help)
        command: click.Command = getattr(module, attr)
        command.short_help = command.short_help or short_help
        return command


def _unavailable(name: str, short_help: str) -> click.Command:
    @click.command(name=name, short_help=f"{short_help} (not installed)")
    def missing() -> None:
        raise click.ClickException(f"'hase {name}' is not available in this build")

    return missing


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="slurm-hase")
def cli() -> None:
    """slurm-hase: hardware-aware, fair GPU scheduling for Slurm.

    \b
    Typical admin flow:
      hase cluster up              # a local test cluster (or use your own Slurm)
      hase model predict --model resnet50 --batch-size 64
      hase simulate --trace gavel --policy fifo --policy fair   # Slurm as is vs. fair
      hase schedd run --once --dry-run
      hase report fairness
    """


def main(argv: list[str] | None = None) -> Any:
    """Entry point: run the group and turn typed errors into messages and exit codes."""
    try:
        return cli.main(args=argv, standalone_mode=False)
    except HaseError as exc:
        click.echo(f"hase: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
