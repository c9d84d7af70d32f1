"""Every use of Hydra's insides, in one module: what a sweep needs of Hydra that its public plugin API
(`Launcher`, `HydraContext`, `hydra.core.utils.run_job`, `JobReturn`) does not give. Nothing else in
harness/ or hydra_plugins/ reaches into Hydra (tests/test_structure.py holds that). Each use holds for
the Hydra that pyproject.toml pins (`SUPPORTED`); tests/driver/test_hydra_insides.py checks that what
each relies on is still there and behaves so, and names the installed version where it is not.

- Each job's config composed once (`compose_once`, from the launcher's `setup`:
  hydra_plugins/harness_ray_launcher): Hydra's sweeper composes every job's config to check the batch
  before it launches it (`Sweeper.validate_batch_is_legal`), and the launcher needs them again. Hydra
  offers no hook for it: the sweep's config loader (one object, the sweeper's and the launcher's
  `hydra_context.config_loader`) has its `load_sweep_config` replaced, on that object alone, by one
  that keeps each composition and hands out copies of it.
- What a failed job failed of (`failure`), to say in the sweep's summary: `JobReturn.return_value`
  raises it (and writes a line to stderr); Hydra keeps it in `_return_value`.

Its imports are Hydra's and OmegaConf's alone: the launcher imports it whenever a sweep sets up.
"""

import copy

from hydra.core.utils import JobReturn
from hydra.types import HydraContext
from omegaconf import DictConfig

SUPPORTED = "hydra-core>=1.3.2,<1.4"
"""The Hydra this module is written for: pyproject.toml's pin (tests/driver/test_hydra_insides.py
holds the two equal, so a new pin means checking this module again)."""


def compose_once(hydra_context: HydraContext) -> None:
    """From now on, the config of each job of the sweep (its overrides) is composed once and handed out
    as copies: a few tenths of a second each on 2 cores, so seconds of a sweep's start-up. To be
    called before the sweeper checks the batch (the launcher's `setup`)."""
    loader = hydra_context.config_loader
    if getattr(loader, "_harness_composed", None) is not None:
        return
    compose = loader.load_sweep_config
    composed: dict[tuple[str, ...], DictConfig] = {}

    def load_sweep_config(master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = tuple(sweep_overrides)
        if key not in composed:
            composed[key] = compose(master_config, list(sweep_overrides))
        return copy.deepcopy(composed[key])

    loader._harness_composed = composed  # type: ignore[attr-defined]
    loader.load_sweep_config = load_sweep_config  # type: ignore[method-assign]


def failure(result: JobReturn) -> BaseException | None:
    """The error a failed job returned, without raising it."""
    return result._return_value
