"""`python -m harness [overrides]`: compose conf/ with Hydra, validate, run one job."""

from __future__ import annotations

import sys
import time

import hydra
from omegaconf import DictConfig

from harness.driver import signals, startup
from harness.driver.job import Job
from harness.driver.signals import stop_reason


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> Job | None:
    started = time.perf_counter()
    job = Job.of_hydra_job(cfg)
    startup.mark("composed")
    if job.in_sweep:
        return job  # the Ray sweep launcher runs it beside the sweep's other jobs, on their one pool
    try:
        result = job.run()
    except KeyboardInterrupt as interrupt:  # Ctrl-C, SIGTERM or SIGHUP (harness/driver/signals.py)
        from harness.driver.resume import resume_hint

        reason, code = stop_reason(interrupt)
        print(f"\n{reason}: the episodes finished so far are in {job.run_dir}; "
              f"{resume_hint(job.run_dir).split('; ', 1)[1]}", file=sys.stderr, flush=True)
        sys.exit(code)
    from harness.driver.run import print_summary

    print_summary(result, started)
    job.verdict(result)
    return None


if __name__ == "__main__":
    signals.install()  # before Hydra composes: a signal at any moment takes the same path
    startup.end_without_collecting()
    try:
        main()
    except KeyboardInterrupt as early:  # outside the job (composing it, printing its summary)
        reason, code = stop_reason(early)
        print(f"\n{reason}", file=sys.stderr, flush=True)
        sys.exit(code)
