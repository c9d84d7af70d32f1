"""`python -m harness.warm start|status|stop`: keep a pool warm for the next commands.

    python -m harness.warm start            # a local Ray, and the pool's actors started ahead
    python -m harness -m variant=baseline,memory ray.address=warm
    python -m harness.warm stop             # or it stops itself after --idle-minutes without use

How it works, and what keeps it honest: harness/driver/warm_pool.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from harness.driver.warm_pool import WarmState, read_state, write_state

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0
TICK_S = 2.0
DEFAULT_STATE = "outputs/warm_pool.json"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    state_path = Path(args.state)
    if args.command == "start":
        return start(state_path, args.workers, args.idle_minutes, args.dashboard)
    if args.command == "stop":
        return stop(state_path)
    if args.command == "serve":
        return serve(state_path, args.workers, args.idle_minutes, args.dashboard)
    return status(state_path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness.warm",
        description="Keep a local Ray and the agent pool's actors started, so that commands with "
                    "ray.address=warm reach their first model call in seconds.")
    parser.add_argument("command", choices=["start", "status", "stop", "serve"],
                        help="start the warm pool (returns once it is ready), say how it is, or stop it "
                             "(serve: the pool's own process, which start runs)")
    parser.add_argument("--state", default=DEFAULT_STATE,
                        help=f"its state file, as ray.warm_pool names it (default: {DEFAULT_STATE})")
    parser.add_argument("--workers", type=int, default=None,
                        help="agent workers it keeps ready (default: one per CPU)")
    parser.add_argument("--idle-minutes", type=float, default=30.0,
                        help="stop after this long without a command (default: 30)")
    parser.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=True,
                        help="serve Ray's dashboard on 127.0.0.1 (default: yes)")
    return parser


def start(state_path: Path, workers: int | None, idle_minutes: float, dashboard: bool = True) -> int:
    """Start the pool's process in a session of its own and wait until it says it is ready."""
    running = read_state(state_path)
    if running is not None:
        print(f"a warm pool already runs here (pid {running.pid}, Ray at {running.address}); "
              f"stop it with: python -m harness.warm stop")
        return 0
    if (workers is not None and workers < 1) or idle_minutes <= 0:
        print("error: --workers must be at least 1 and --idle-minutes above 0", file=sys.stderr)
        return 2
    log_path = state_path.with_suffix(".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "harness.warm", "serve", "--state", str(state_path),
               "--idle-minutes", str(idle_minutes), *(["--workers", str(workers)] if workers else []),
               "--dashboard" if dashboard else "--no-dashboard"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        state = read_state(state_path)
        if state is not None and state.pid == process.pid:
            print(f"warm pool ready: Ray at {state.address}, {state.workers} agent workers, stops after "
                  f"{idle_minutes:g} minutes without use (pid {state.pid}, log {log_path}); run commands "
                  "with ray.address=warm" + (f"; dashboard {state.dashboard}" if state.dashboard else ""))
            return 0
        if process.poll() is not None:
            tail = log_path.read_text().strip().splitlines()[-1:] or ["(no output)"]
            print(f"error: the warm pool did not start (exit code {process.returncode}): {tail[0]} "
                  f"(see {log_path})", file=sys.stderr)
            return 1
        time.sleep(0.2)
    process.terminate()
    print(f"error: the warm pool was not ready after {START_TIMEOUT_S:.0f} s (see {log_path})",
          file=sys.stderr)
    return 1


def _running(state_path: Path) -> WarmState | None:
    """The warm pool at `state_path`, or None (and it says so)."""
    state = read_state(state_path)
    if state is None:
        print(f"no warm pool runs here ({state_path})")
    return state


def status(state_path: Path) -> int:
    state = _running(state_path)
    if state is None:
        return 1
    held = f"leased by {state.holder}" if state.holder else f"idle for {state.idle_s:.0f} s"
    print(f"warm pool: Ray at {state.address}, {state.workers} agent workers, generation {state.generation} "
          f"{'ready' if state.ready else 'starting'}, {held} (stops after {state.idle_minutes:g} idle "
          f"minutes), pid {state.pid}")
    return 0


def stop(state_path: Path) -> int:
    """SIGTERM to the pool's process, which shuts its Ray down and ends every process of it."""
    state = _running(state_path)
    if state is None:
        return 0
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(state.pid)
        process.send_signal(signal.SIGTERM)
        process.wait(STOP_TIMEOUT_S)
        print(f"warm pool stopped (pid {state.pid})")
        return 0
    if read_state(state_path) is not None:
        print(f"error: the warm pool (pid {state.pid}) did not stop within {STOP_TIMEOUT_S:.0f} s",
              file=sys.stderr)
        return 1
    print(f"warm pool stopped (pid {state.pid})")
    return 0


def serve(state_path: Path, workers: int | None, idle_minutes: float, dashboard: bool) -> int:
    """The pool's process: its Ray, its keeper, the state file; until stopped or idle too long."""
    import ray

    from harness.config import RaySettings
    from harness.driver.session import ray_session
    from harness.driver.warm_pool import KEEPER, WARM_NAMESPACE, WarmKeeper
    from harness.errors import one_line

    settings = RaySettings(address=None, num_workers=workers, include_dashboard=dashboard, limits=None)
    try:
        with ray_session(settings, namespace=WARM_NAMESPACE) as (address, dashboard):
            size = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
            keeper = ray.remote(WarmKeeper).options(name=KEEPER, num_cpus=0).remote(size)
            ray.get(keeper.start.remote())
            state = WarmState(address=str(address), pid=os.getpid(), started=psutil.Process().create_time(),
                              workers=size, idle_minutes=idle_minutes, python=sys.executable,
                              pythonpath=os.environ.get("PYTHONPATH", ""), cwd=os.getcwd(),
                              dashboard=dashboard)
            while True:
                state = state.model_copy(update=ray.get(keeper.status.remote(), timeout=60))
                write_state(state_path, state)
                if state.idle_s > idle_minutes * 60:
                    print(f"idle for {idle_minutes:g} minutes: stopping", flush=True)
                    break
                time.sleep(TICK_S)
    except KeyboardInterrupt:  # `stop` (SIGTERM), SIGHUP or Ctrl-C: the Ray is shut down all the same
        print("stopped", flush=True)
    except ray.exceptions.RayError as error:  # its keeper died (and the actors it owned with it)
        print(f"the warm pool's keeper failed ({one_line(error, 300)}): stopped", flush=True)
        return 1
    finally:
        with contextlib.suppress(OSError, ValueError):
            if WarmState.model_validate_json(state_path.read_text()).pid == os.getpid():
                state_path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
