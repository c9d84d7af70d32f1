"""Hydra callbacks the harness registers in conf/config.yaml (`hydra.callbacks`)."""

from __future__ import annotations

from typing import Any, NoReturn

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.config import ConfigError, check_output_dir
from harness.exit_codes import exit_for


class OutputDirCheck(Callback):
    """Hydra creates the output directory before `main` runs, and a path it cannot create ends in a
    traceback: check it first, and stop with one line (exit 2)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _check_dir(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _check_dir(config, "hydra.sweep.dir")


def _check_dir(config: DictConfig, field: str) -> None:
    try:
        check_output_dir(field, str(OmegaConf.select(config, field)))
    except OmegaConfBaseException as error:  # e.g. an interpolation that does not resolve
        _stop(ConfigError(f"invalid config: {field}: {str(error).splitlines()[0]}"))
    except ConfigError as error:
        _stop(error)


def _stop(error: ConfigError) -> NoReturn:
    """A callback's exception would only be a warning: exit here."""
    raise exit_for(error)
