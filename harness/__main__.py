"""`python -m harness [overrides]`: compose conf/ with Hydra, validate, run one job."""

from __future__ import annotations

import sys
import time

import hydra
from omegaconf import DictConfig

from harness.driver.job import Job


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> Job | None:
    started = time.perf_counter()
    job = Job.of_hydra_job(cfg)
    if job.in_sweep:
        return job  # the Ray sweep launcher runs it beside the sweep's other jobs, on their one pool
    try:
        result = job.run()
    except KeyboardInterrupt:
        print(f"\ninterrupted: the episodes finished so far are in {job.run_dir}", file=sys.stderr)
        sys.exit(130)
    from harness.driver.run import print_summary

    print_summary(result, started)
    job.verdict(result)
    return None


if __name__ == "__main__":
    main()
