"""One command line measured whole: run in a process session of its own against the bench's HTTP
model (`measure`: wall time, time to the first call, peak memory, CPU of every process it starts), on
its own Ray or on a warm pool (`WarmPoolProcess`). The sweep and versus measurements are made of
these.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.bench.common import ROOT
from harness.bench.fake_chat import MODEL, ServerProcess
from harness.bench.meter import ProcessMeter, kill_session, wait_unreaped

GIB = 2**30


def fake_model_overrides(server: ServerProcess, tasks: int, max_concurrency: int,
                         model_checks: Path) -> list[str]:
    """`python -m harness` overrides that run the baseline on the bench's HTTP model, `tasks` calls an
    agent run, without the response cache, the dashboard or the progress bar; the model check kept in
    `model_checks`, the bench's own directory, so that its first command checks in full
    (`model_check_kept`)."""
    return ["variant=baseline", "model=litellm", f"model.name={MODEL}", f"model.api_base={server.api_base}",
            f"model.max_concurrency={max_concurrency}", "cache.enabled=false", "embedder=hashing",
            f"stream.num_tasks={tasks}", "stream.tuning_size=0", "ray.include_dashboard=false",
            "progress=false", f"cache.model_checks={model_checks}"]


def model_check_kept(model_checks: Path) -> str:
    """"yes" where a command of `fake_model_overrides` will recall its model check from `model_checks`
    (harness/driver/preflight.py `recall_checks`: litellm not imported for it), else "no"."""
    return "yes" if any(model_checks.glob("*.json")) else "no"


class WarmPoolProcess:
    """A warm pool (`python -m harness.warm start`) with its state file in `directory`, stopped on
    exit; `wait_ready` before each command, so that each finds its generation started."""

    def __init__(self, directory: Path, dashboard: bool = False) -> None:
        self.state_path = directory / "warm_pool.json"
        started = subprocess.run([sys.executable, "-m", "harness.warm", "start", "--state",
                                  str(self.state_path), "--dashboard" if dashboard else "--no-dashboard"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=600)
        from harness.driver.warm_pool import read_state  # brings Ray: only where a warm pool is used

        state = read_state(self.state_path)
        if started.returncode != 0 or state is None:
            raise RuntimeError(f"the warm pool did not start: {started.stdout}{started.stderr}")
        self.pid = state.pid

    def overrides(self) -> list[str]:
        return ["ray.address=warm", f"ray.warm_pool={self.state_path}"]

    def wait_ready(self, timeout_s: float = 300) -> None:
        from harness.driver.warm_pool import read_state  # brings Ray: only where a warm pool is used

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = read_state(self.state_path)
            if state is None:
                raise RuntimeError(f"the warm pool stopped (see {self.state_path.with_suffix('.log')})")
            if state.ready and state.holder is None:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the warm pool was not ready within {timeout_s:.0f} s")

    def __enter__(self) -> WarmPoolProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run([sys.executable, "-m", "harness.warm", "stop", "--state", str(self.state_path)],
                       cwd=ROOT, capture_output=True, timeout=120)
        kill_session(self.pid)


@dataclass
class Measured:
    """One command's measurements."""

    wall_s: float
    returncode: int | None
    """None: stopped (over the memory limit or the timeout)."""
    first_call_s: float | None
    """Seconds from the command's start to the first request the server saw."""
    requests: int
    """Requests the server saw from the command's start."""
    peak_in_flight: int
    """The most requests the server held at once during the command."""
    peak_rss: int
    """Bytes: the largest summed RSS of the command's processes (and of the sessions `also`)."""
    used_rise: int
    """Bytes: the machine's used memory at its peak over it at the start (others' work shows here too)."""
    cpu_s: float
    """CPU seconds (user + system) of every process of the command's session, and of `also`'s."""
    load: float | None = None
    """Mean 1-minute load average of the machine during the command."""
    startup_cpu_s: float | None = None
    """CPU seconds of the command's processes up to the first request the server saw: its start-up."""
    exit_s: float | None = None
    """Seconds from the server's last reply (its last request's arrival plus its latency) to the
    command's exit: what the command does once its last call is answered."""
    output: str = ""
    stopped: str = ""


def measure(argv: list[str], server: ServerProcess, log_path: Path, timeout_s: float = 3600,
            used_limit: int | None = None, env: dict[str, str] | None = None,
            also: tuple[int, ...] = ()) -> Measured:
    """Run `argv` in a session of its own (with `env` added to this environment), sampled by a
    `ProcessMeter` (with the sessions `also`), and read what the server saw."""
    server.reset()
    started = time.time()
    with log_path.open("w") as log:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, env={**os.environ, **(env or {})})
        stopped = ""
        with ProcessMeter(process.pid, also, interval_s=0.2, used_limit=used_limit) as meter:
            returncode: int | None = None
            if wait_unreaped(process.pid, timeout_s):
                meter.sample()  # the command's last CPU seconds, read from it before it is reaped
                returncode = process.wait()
            else:
                stopped = f"timeout {timeout_s:.0f} s"
            wall = time.time() - started
            if meter.over_limit:
                stopped = f"used memory over {used_limit / GIB:.0f} GiB"  # type: ignore[operator]
            if stopped:
                kill_session(process.pid)
                process.wait()
                returncode = None
        kill_session(process.pid)  # Ray processes left behind, if any
    seen = server.log()
    arrivals = [t for t in seen["arrivals"] if t >= started]
    return Measured(wall_s=wall, returncode=returncode,
                    first_call_s=min(arrivals) - started if arrivals else None, requests=len(arrivals),
                    peak_in_flight=seen["peak_in_flight"], peak_rss=meter.peak_rss,
                    used_rise=meter.peak_used - meter.used_at_start, cpu_s=meter.cpu_s,
                    load=sum(meter.loads) / len(meter.loads) if meter.loads else None,
                    exit_s=started + wall - max(arrivals) - server.latency_s if arrivals else None,
                    startup_cpu_s=meter.cpu_between(started, min(arrivals)) if arrivals else None,
                    output=log_path.read_text(errors="replace")[-4000:], stopped=stopped)
