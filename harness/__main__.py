"""`python -m harness [overrides]`: compose conf/ with Hydra, validate, run one job."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from harness.config import HarnessConfig
from harness.errors import disk_full, exit_with, is_disk_full
from harness.exit_codes import EXPECTED_ERRORS, exit_for


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    started = time.perf_counter()
    try:
        settings = HarnessConfig.from_dictconfig(cfg)
        from harness.run import most_calls_failed, print_summary, run  # Ray loads only for a valid config

        resolved = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(resolved, dict)
        result = run(settings, Path(HydraConfig.get().runtime.output_dir), resolved)
    except EXPECTED_ERRORS as error:
        raise exit_for(error) from None
    except OSError as error:  # a full disk where no stage expected one (the lock, a resume's clean-up)
        if not is_disk_full(error):
            raise
        from harness.session import resume_hint

        run_dir = Path(HydraConfig.get().runtime.output_dir)
        raise exit_for(disk_full(run_dir, error).with_hint(resume_hint(run_dir))) from None
    except KeyboardInterrupt:
        print(f"\ninterrupted: the episodes finished so far are in {HydraConfig.get().runtime.output_dir}",
              file=sys.stderr)
        sys.exit(130)
    if settings.ray.limits is None:  # a sweep's jobs are shown by the launcher's one live view
        print_summary(result, started)
    failure = most_calls_failed(result.run_dir)
    if failure is not None:
        raise exit_with(1, f"error: {failure}")


if __name__ == "__main__":
    main()
