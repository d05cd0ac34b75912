"""Where `hase model train` and `refit` put a model: its file, its rows and the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from slurm_hase.predict.api import Predictor
    from slurm_hase.predict.dataset import Measurement


def check_registry(registry: str | None) -> None:
    """Refuse an existing file that is not a model registry before any work starts: a bad
    option like the other output checks (exit 2)."""
    if registry:
        from slurm_hase.errors import ConfigError, StoreError
        from slurm_hase.predict.registry import ModelRegistry

        try:
            ModelRegistry.check(registry)
        except StoreError as exc:
            raise ConfigError(f"--registry {exc}") from None


def store_model(pred: Predictor, out: str, registry: str | None, note: str, msg: str,
                rows: tuple[list[Measurement], str] | None = None) -> None:
    """Save the model file (and ``rows`` as CSV), and a version in the registry when one is
    given; echo `msg`. All or nothing: the files are staged and renamed into place only once the
    registry holds the version."""
    from slurm_hase.errors import DataError, PredictorError
    from slurm_hase.predict.dataset import csv_text
    from slurm_hase.predict.files import Output, write_together
    from slurm_hase.predict.modelfile import model_to_json

    outputs: list[Output] = []
    if rows is not None:
        outputs.append((rows[1], csv_text(rows[0])[0], DataError))
    outputs.append((out, model_to_json(pred), PredictorError))
    versions: list[int] = []

    def record() -> None:
        from slurm_hase.predict.registry import ModelRegistry

        versions.append(ModelRegistry(str(registry)).save(pred, note=note))

    write_together(outputs, record if registry else None)
    if versions:
        msg += f" (registry version {versions[0]})"
    if rows is not None:
        msg += f"; {len(rows[0])} site rows -> {rows[1]}"
    click.echo(msg)
