"""A job as Hydra composed it: validated, with what it knows of its Hydra job read at once, then run.

`python -m harness` prepares its job and runs it on a pool of its own. The Ray sweep launcher
(harness/driver/multirun.py, which Hydra reaches through hydra_plugins/harness_ray_launcher) prepares
every job of a sweep in turn, under each one's Hydra job (its directory, its `.hydra/`), and then runs
them side by side on the sweep's one pool, each from a thread of its own, where Hydra's per-job config
cannot be asked any more.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from harness import extras
from harness.config import HarnessConfig
from harness.errors import disk_full, exit_with, is_disk_full
from harness.exit_codes import EXPECTED_ERRORS, exit_for

if TYPE_CHECKING:  # Ray loads only once a valid job runs
    from harness.driver.execute import JobIdentity
    from harness.driver.pool import AgentPool
    from harness.driver.run import RunResult


@dataclass(frozen=True)
class Job:
    settings: HarnessConfig
    run_dir: Path
    resolved_config: dict[str, Any]
    identity: JobIdentity
    resume_hint: str

    @classmethod
    def of_hydra_job(cls, cfg: DictConfig) -> Job:
        """The job Hydra is running now; a bad config value, or an extra its choices need that is not
        installed, exits in one line (harness.exit_codes)."""
        try:
            settings = HarnessConfig.from_dictconfig(cfg)
            extras.check(settings)
        except EXPECTED_ERRORS as error:
            raise exit_for(error) from None
        from harness.driver.execute import JobIdentity
        from harness.driver.resume import resume_hint

        resolved = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(resolved, dict)
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        return cls(settings, run_dir, resolved, JobIdentity.of_hydra_job(), resume_hint(run_dir))

    @property
    def in_sweep(self) -> bool:
        """Whether the Ray sweep launcher runs this job on its sweep's pool (it sets `ray.limits`)."""
        return self.settings.ray.limits is not None

    def run(self, pool: AgentPool | None = None) -> RunResult:
        """Run the job (on `pool`, or a pool of its own); an error it expects ends it as the command
        line does: one line on stderr, and the exit to raise (harness.exit_codes)."""
        from harness.driver.run import run

        try:
            return run(self.settings, self.run_dir, self.resolved_config, pool, self.identity,
                       self.resume_hint)
        except EXPECTED_ERRORS as error:
            raise exit_for(error) from None
        except OSError as error:  # a full disk where no stage expected one (the lock, a resume's clean-up)
            if not is_disk_full(error):
                raise
            raise exit_for(disk_full(self.run_dir, error).with_hint(self.resume_hint)) from None

    def verdict(self, result: RunResult) -> None:
        """Exit non-zero when the numbers would mislead: most of the job's model calls failed."""
        from harness.driver.run import most_calls_failed

        failure = most_calls_failed(result.run_dir)
        if failure is not None:
            raise exit_with(1, f"error: {failure}")
