"""`hydra/launcher=ray` (the harness's default for -m): every job of a sweep at once, on one pool.

Hydra finds its launchers here, in the `hydra_plugins` namespace; what a sweep does is the harness's
own (harness/driver/multirun.py `launch_sweep`: one Ray, one pool started as every pool is, each job
prepared under its own Hydra job and run beside the others). This module is the Launcher interface:
it registers `ray` in the `hydra/launcher` group and composes each job's config once (through
Hydra's insides: harness/driver/hydra_insides.py).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class RayLauncherConf:
    _target_: str = "hydra_plugins.harness_ray_launcher.ray_launcher.RayLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="ray", node=RayLauncherConf)


class RayLauncher(Launcher):
    def __init__(self) -> None:
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from harness.driver.hydra_insides import compose_once  # Hydra's alone: milliseconds

        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        compose_once(hydra_context)  # before the sweeper composes the batch to check it

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        # The sweep's import of the harness, here rather than at the top: Hydra imports every plugin
        # whenever it starts (a single run, `--help`, a bad value on the command line), and the sweep's
        # driver brings Ray, polars and the pool with it (about 2 s on 2 cores).
        from harness.driver.multirun import launch_sweep

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        return launch_sweep(self.config, self.hydra_context, self.task_function, job_overrides,
                            initial_job_idx)
