"""`python -m harness.bench.sweep`: what a sweep costs, through the CLI, against its model calls.

The model is an HTTP one: a small OpenAI-compatible server (`FakeChatServer`, aiohttp, one event
loop) that answers every chat request after a fixed latency, started in a subprocess of its own on
127.0.0.1. Every run is the real command line, `python -m harness ...`, in a process session of its
own, pointed at it with `model=litellm model.name=openai/fake model.api_base=... cache.enabled=false
embedder=hashing`; nothing of the harness runs here but that server, so this measures whatever the sweep
launcher does today. Rows:

- a sweep of N jobs, `python -m harness -m variant=baseline "seed=range(N)"` (one agent run each);
- one job of N agent runs, `python -m harness variant=baseline seeds=[0,...,N-1]`.

Each row gives the wall seconds of the command, the model-bound ideal and the wall as a percentage
of it, the same over the run window (first episode start to last episode end, from the episodes
tables), the seconds from the command to the first request the server saw, the peak RSS of the
command's process session and the peak rise of the machine's used memory, and the CPU seconds
(user + system) of the session per model call. `--quick` runs 1 and 4 jobs and 8 agent runs on
tiny streams.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.driver.startup import STAGES
from harness.models.local_http import LocalHttpServer

ROOT = Path(__file__).resolve().parents[2]
MODEL = "openai/fake"
GIB = 2**30


# --- the HTTP model ---------------------------------------------------------------------------


class FakeChatServer(LocalHttpServer):
    """An OpenAI-compatible chat-completions endpoint that answers `answer` after `latency_s`.

    One asyncio event loop (aiohttp), so hundreds of requests wait their latency at once.
    `POST /v1/chat/completions` answers with a `usage` block (prompt tokens: the messages' characters
    / 4; completion tokens: the answer's), or with `status` and an OpenAI-style error when that is
    not 200; `GET /v1/models` lists the one model. For the bench: `GET /bench/log` returns the
    arrival time (Unix seconds) of every chat request and the most that were in flight at once;
    `POST /bench/reset` clears both. `requests` keeps each request's path, Authorization header
    and body, in arrival order.

    `start()` serves from a daemon thread of this process (tests); `python -m harness.bench.sweep
    --serve` serves in a process of its own and prints `port <n>` once it listens (the bench).
    """

    backlog = 2048  # hundreds of agents connect at once

    def __init__(self, latency_s: float = 0.2, answer: str = "Paris", status: int = 200,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.latency_s, self.answer, self.status = latency_s, answer, status
        super().__init__(host, port)
        self.requests: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.in_flight = 0
        self.peak_in_flight = 0

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> Any:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/bench/log", self._log)
        app.router.add_post("/bench/reset", self._reset)
        return app

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        self.arrivals.append(time.time())
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            body = await request.json()
            self.requests.append({"path": request.path, "auth": request.headers.get("Authorization"),
                                  "body": body})
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        if self.status != 200:
            return web.json_response({"error": {"message": f"fake server answers {self.status}",
                                                "type": "invalid_request_error", "code": str(self.status)}},
                                     status=self.status)
        chars = sum(len(m.get("content") or "") if isinstance(m.get("content"), str)
                    else len(json.dumps(m.get("content"))) for m in body.get("messages", []))
        prompt_tokens, completion_tokens = max(1, chars // 4), max(1, len(self.answer) // 4)
        return web.json_response({
            "id": f"chatcmpl-{len(self.arrivals)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": self.answer}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}})

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model",
                                                               "created": 0, "owned_by": "bench"}]})

    async def _log(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"arrivals": self.arrivals, "peak_in_flight": self.peak_in_flight})

    async def _reset(self, request: Any) -> Any:
        from aiohttp import web

        self.arrivals, self.requests, self.peak_in_flight = [], [], self.in_flight
        return web.json_response({"ok": True})



def serve_forever(latency_s: float, port: int = 0) -> None:
    """The server in this process, until killed; prints `port <n>` once it listens."""
    server = FakeChatServer(latency_s, port=port)

    async def main() -> None:
        await server._start()
        print(f"port {server.port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class ServerProcess:
    """`FakeChatServer` in a subprocess (its CPU is neither the bench's nor the measured run's)."""

    def __init__(self, latency_s: float = 0.2) -> None:
        self.latency_s = latency_s
        self.process = subprocess.Popen([sys.executable, "-m", "harness.bench.sweep", "--serve",
                                         f"--latency={latency_s}"], stdout=subprocess.PIPE, text=True,
                                        start_new_session=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("port "):
            self.close()
            raise RuntimeError(f"the fake chat server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.api_base = f"http://127.0.0.1:{self.port}/v1"

    def _call(self, method: str, path: str) -> dict[str, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    def reset(self) -> None:
        self._call("POST", "/bench/reset")

    def log(self) -> dict[str, Any]:
        return self._call("GET", "/bench/log")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WarmPoolProcess:
    """A warm pool (`python -m harness.warm start`) with its state file in `directory`, stopped on
    exit; `wait_ready` before each command, so that each finds its generation started."""

    def __init__(self, directory: Path, dashboard: bool = False) -> None:
        from harness.driver.warm_pool import read_state

        self.state_path = directory / "warm_pool.json"
        started = subprocess.run([sys.executable, "-m", "harness.warm", "start", "--state",
                                  str(self.state_path), "--dashboard" if dashboard else "--no-dashboard"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=600)
        state = read_state(self.state_path)
        if started.returncode != 0 or state is None:
            raise RuntimeError(f"the warm pool did not start: {started.stdout}{started.stderr}")
        self.pid = state.pid

    def overrides(self) -> list[str]:
        return ["ray.address=warm", f"ray.warm_pool={self.state_path}"]

    def wait_ready(self, timeout_s: float = 300) -> None:
        from harness.driver.warm_pool import read_state

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


# --- measuring one command --------------------------------------------------------------------


class SessionMeter:
    """Samples every process of one session (a command started with `start_new_session=True`, and
    everything it starts: a local Ray's gcs_server, raylet, dashboard and workers stay in it, even
    when reparented) every `interval_s`: the peak of their summed RSS, and CPU seconds (user +
    system) per process at its last sample, summed (a process that exits loses at most its last
    interval). Also the peak of the machine's used memory. `over_limit` is set, and the session
    killed, when the machine's used memory passes `used_limit` bytes. The processes of the sessions
    `also` (a warm pool's, which the command uses) are sampled too, their CPU counted from the first
    sample on."""

    def __init__(self, session: int, interval_s: float = 0.2, used_limit: int | None = None,
                 also: tuple[int, ...] = ()) -> None:
        import psutil

        self.session, self.interval_s, self.used_limit = session, interval_s, used_limit
        self.sessions = {session, *also}
        self._before: dict[tuple[int, float], float] = {}
        self.used_at_start = psutil.virtual_memory().used
        self.peak_used = self.used_at_start
        self.peak_rss = 0
        self.over_limit = False
        self.loads: list[float] = []
        """The machine's 1-minute load average at each sample (others' work shows here)."""
        self._cpu: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def cpu_s(self) -> float:
        return sum(self._cpu.values()) - sum(self._before.get(key, 0.0) for key in self._cpu)

    def members(self) -> list[Any]:
        import psutil

        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if os.getsid(process.pid) in self.sessions:
                    found.append(process)
        return found

    def sample(self) -> None:
        import psutil

        rss = 0
        for process in self.members():
            try:
                with process.oneshot():
                    times = process.cpu_times()  # readable from a zombie too, its memory not
                    self._cpu[(process.pid, process.create_time())] = times.user + times.system
                    rss += process.memory_info().rss
            except psutil.Error:
                continue
        self.peak_rss = max(self.peak_rss, rss)
        used = psutil.virtual_memory().used
        self.loads.append(os.getloadavg()[0])
        self.peak_used = max(self.peak_used, used)
        if self.used_limit is not None and used > self.used_limit and not self.over_limit:
            self.over_limit = True
            kill_session(self.session)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> SessionMeter:
        if len(self.sessions) > 1:
            self.sample()
            self._before = {key: cpu for key, cpu in self._cpu.items() if key[0] != self.session}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def wait_unreaped(pid: int, timeout_s: float) -> bool:
    """Wait until child `pid` has exited, leaving it unreaped (a zombie) so that its CPU times can still be
    read: a meter that samples every interval would otherwise lose the process's last one. False when it
    is still running after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
            return True
        time.sleep(0.02)
    return False


def kill_session(session: int) -> None:
    """SIGKILL every process of a session this bench started (never by name)."""
    import psutil

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session, signal.SIGKILL)
    for process in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(process.pid) == session:
                process.kill()


@dataclass
class Measured:
    """One command's measurements."""

    wall_s: float
    returncode: int | None
    """None: stopped (over the memory limit or the timeout)."""
    first_call_s: float | None
    """Seconds from the command's start to the first request the server saw."""
    requests: int
    peak_in_flight: int
    peak_rss: int
    used_rise: int
    cpu_s: float
    load: float | None = None
    """Mean 1-minute load average of the machine during the command."""
    output: str = ""
    stopped: str = ""


def measure(argv: list[str], server: ServerProcess, log_path: Path, timeout_s: float = 3600,
            used_limit: int | None = None, env: dict[str, str] | None = None,
            also: tuple[int, ...] = ()) -> Measured:
    """Run `argv` in a session of its own (with `env` added to this environment), sampled by a
    `SessionMeter` (with the sessions `also`), and read what the server saw."""
    server.reset()
    started = time.time()
    with log_path.open("w") as log:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, env={**os.environ, **(env or {})})
        stopped = ""
        with SessionMeter(process.pid, used_limit=used_limit, also=also) as meter:
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
                    output=log_path.read_text(errors="replace")[-4000:], stopped=stopped)


# --- reading the results ----------------------------------------------------------------------


def job_dirs(directory: Path) -> list[Path]:
    """A sweep's job directories (`<sweep dir>/<n>/`), or the run directory itself."""
    if (directory / "episodes").is_dir() or (directory / "llm_calls").is_dir():
        return [directory]
    jobs = [d for d in directory.iterdir() if d.name.isdigit() and d.is_dir()]
    return sorted(jobs, key=lambda d: int(d.name))


def _table(dirs: list[Path], name: str) -> Any:
    from harness.tables.reading import read_tables

    return read_tables(dirs, name)


def _unix(moment: dt.datetime) -> float:
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)).timestamp()


@dataclass
class Results:
    """What a command's tables say: the chat model's calls (not cached: each reached the server),
    the longest chain of them in one agent run, episodes and their window."""

    jobs: int
    runs: int
    calls: int
    chain: int
    episodes: int
    window_s: float | None
    errors: int = 0
    per_run: dict[str, int] = field(default_factory=dict)
    startup_s: dict[str, float] = field(default_factory=dict)
    """Each stage of the command's start-up (manifest.json's startup_s), the earliest over its jobs."""


def read_results(directory: Path, model: str = MODEL) -> Results:
    """Read `llm_calls` and `episodes` of every job under `directory` (a sweep dir or a run dir)."""
    import polars as pl

    dirs = job_dirs(directory)
    calls = _table(dirs, "llm_calls")
    if calls.height:
        calls = calls.filter((pl.col("model") == model) & ~pl.col("cached").fill_null(False))
    per_run = ({row["run_id"]: row["len"] for row in calls.group_by("run_id").len().iter_rows(named=True)}
               if calls.height else {})
    episodes = _table(dirs, "episodes")
    window = (_unix(episodes["finished_at"].max()) - _unix(episodes["started_at"].min())
              if episodes.height else None)
    errors = calls.filter(pl.col("error").is_not_null()).height if calls.height else 0
    return Results(jobs=len(dirs), runs=len(per_run), calls=calls.height,
                   chain=max(per_run.values(), default=0), episodes=episodes.height, window_s=window,
                   errors=errors, per_run=per_run, startup_s=_startup(dirs))


def _startup(dirs: list[Path]) -> dict[str, float]:
    stages: dict[str, float] = {}
    for directory in dirs:
        with contextlib.suppress(OSError, ValueError, KeyError):
            for stage, seconds in json.loads((directory / "manifest.json").read_text())["startup_s"].items():
                stages[stage] = min(seconds, stages.get(stage, seconds))
    return stages


def ideal_s(results: Results, latency_s: float, max_concurrency: int) -> float:
    """The model-bound ideal: nothing but the model's latency, with every call sent as soon as it
    may be. Two things bound it, and the larger holds:

    - the chain: an agent run makes its calls one after another (the baseline makes one per task),
      so the run with the most calls needs at least `chain x latency`;
    - the cap: at most `max_concurrency` calls are in flight at once (model.max_concurrency, shared
      by every job of a sweep), so all of them need at least `calls / max_concurrency x latency`.

    ideal = max(chain, calls / max_concurrency) x latency.
    """
    return max(results.chain, results.calls / max_concurrency) * latency_s


# --- the rows ---------------------------------------------------------------------------------


def _model_overrides(server: ServerProcess, tasks: int, max_concurrency: int) -> list[str]:
    return ["variant=baseline", "model=litellm", f"model.name={MODEL}", f"model.api_base={server.api_base}",
            f"model.max_concurrency={max_concurrency}", "cache.enabled=false", "embedder=hashing",
            f"stream.num_tasks={tasks}", "stream.tuning_size=0", "ray.include_dashboard=false",
            "progress=false"]


def _row(kind: str, n: int, measured: Measured, results: Results, latency_s: float,
         max_concurrency: int) -> dict[str, Any]:
    ideal = ideal_s(results, latency_s, max_concurrency)

    def percent(seconds: float | None) -> float | None:
        return 100 * seconds / ideal if seconds is not None and ideal else None

    return {"what": kind, "n": n, "agent runs": results.runs, "model calls": results.calls,
            "server requests": measured.requests, "peak in flight": measured.peak_in_flight,
            "wall s": measured.wall_s, "ideal s": ideal, "wall/ideal %": percent(measured.wall_s),
            "run window s": results.window_s, "window/ideal %": percent(results.window_s),
            **{f"{stage} s": results.startup_s.get(stage) for stage in STAGES},
            "first call s": measured.first_call_s, "peak RSS GiB": measured.peak_rss / GIB,
            "used +GiB": measured.used_rise / GIB,
            "CPU ms/call": 1000 * measured.cpu_s / results.calls if results.calls else None,
            "CPU s": measured.cpu_s, "machine load": measured.load,
            "status": measured.stopped or ("ok" if measured.returncode == 0
                                           else f"exit {measured.returncode}")}


def sweep_section(jobs: list[int], tasks: int = 50, latency_s: float = 0.2, max_concurrency: int = 256,
                  server: ServerProcess | None = None, directory: Path | None = None,
                  used_limit_gib: float | None = 16.0, timeout_s: float = 3600,
                  echo: bool = True, warm: WarmPoolProcess | None = None) -> list[dict[str, Any]]:
    """One row per N in `jobs`: the sweep `python -m harness -m variant=baseline "seed=range(N)"`, N
    jobs of one agent run of `tasks` tasks each (the baseline: one model call per task), on the HTTP
    model at `latency_s`, into `<directory>/sweep-N` (a temporary directory when None).

    Columns: wall s (the command, start to exit); ideal s (`ideal_s`: max(longest chain of calls in
    one agent run, calls / max_concurrency) x latency, from the llm_calls tables); wall/ideal %;
    run window s (first episode start to last episode end, all jobs) and window/ideal %; composed,
    ray, pool and checked s (the start-up, stage by stage: manifest.json's startup_s); first
    call s (command start to the first request the server logged); peak RSS GiB (the command's
    process session, summed, sampled every 0.2 s) and used +GiB (peak rise of the machine's used
    memory, which counts shared memory once but also whatever else the machine runs); CPU ms/call
    (user + system of the whole session / model calls); server requests and peak in flight (what
    the server saw); machine load (mean 1-minute load average during the command: on a shared
    machine, others' work slows every column). A run that pushes the machine's used memory past
    `used_limit_gib` is stopped (status says so). `max_concurrency` (model.max_concurrency, shared
    by the jobs of a sweep) defaults above the agent runs measured, so that the chain bounds the
    ideal and what is left is the harness's own overhead; the harness's default is 8. With `warm`,
    each command runs on that warm pool (`ray.address=warm`), started and ready before it: its rows
    say "(warm)", and count the pool's processes in RSS and CPU."""
    return _section([("sweep", n) for n in jobs], tasks, latency_s, max_concurrency, server, directory,
                    used_limit_gib, timeout_s, echo, warm)


def runs_section(runs: list[int], tasks: int = 50, latency_s: float = 0.2, max_concurrency: int = 256,
                 server: ServerProcess | None = None, directory: Path | None = None,
                 used_limit_gib: float | None = 16.0, timeout_s: float = 3600,
                 echo: bool = True, warm: WarmPoolProcess | None = None) -> list[dict[str, Any]]:
    """One row per N in `runs`: one job of N agent runs, `python -m harness variant=baseline
    seeds=[0,...,N-1]`; the same columns as `sweep_section` (and `warm` as there)."""
    return _section([("one job", n) for n in runs], tasks, latency_s, max_concurrency, server, directory,
                    used_limit_gib, timeout_s, echo, warm)


def _section(plan: list[tuple[str, int]], tasks: int, latency_s: float, max_concurrency: int,
             server: ServerProcess | None, directory: Path | None, used_limit_gib: float | None,
             timeout_s: float, echo: bool, warm: WarmPoolProcess | None = None) -> list[dict[str, Any]]:
    with contextlib.ExitStack() as stack:
        if server is None:
            server = stack.enter_context(ServerProcess(latency_s))
        elif server.latency_s != latency_s:
            raise ValueError(f"the server answers after {server.latency_s} s, not {latency_s} s")
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-sweep-")))
        rows = []
        for kind, n in plan:
            overrides = _model_overrides(server, tasks, max_concurrency) + (warm.overrides() if warm else [])
            out = directory / f"{'sweep' if kind == 'sweep' else 'runs'}-{n}{'-warm' if warm else ''}"
            if warm is not None:
                warm.wait_ready()
            if kind == "sweep":
                argv = [sys.executable, "-m", "harness", "-m", *overrides, f"seed=range({n})",
                        f"hydra.sweep.dir={out}"]
            else:
                argv = [sys.executable, "-m", "harness", *overrides,
                        f"seeds=[{','.join(str(s) for s in range(n))}]", f"hydra.run.dir={out}"]
            measured = measure(argv, server, directory / f"{out.name}.log", timeout_s,
                               int(used_limit_gib * GIB) if used_limit_gib else None,
                               also=(warm.pid,) if warm else ())
            results = (read_results(out) if out.is_dir()
                       else Results(jobs=0, runs=0, calls=0, chain=0, episodes=0, window_s=None))
            row = _row(f"{kind} (warm)" if warm else kind, n, measured, results, latency_s, max_concurrency)
            rows.append(row)
            if echo:
                print(table([row]), flush=True)
                if row["status"] != "ok":
                    print(f"({kind} {n}: {row['status']}; the command's last output:)\n"
                          f"{measured.output[-2000:]}", flush=True)
        return rows


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table (numbers rounded for reading)."""
    columns = list(dict.fromkeys(k for row in rows for k in row))

    def cell(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.sweep",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="jobs 1 and 4, 8 agent runs, 5 tasks each")
    parser.add_argument("--jobs", type=int, nargs="*", help="sweep sizes (default 1 16 64)")
    parser.add_argument("--runs", type=int, nargs="*", help="agent runs in one job (default 64 256)")
    parser.add_argument("--tasks", type=int, help="tasks (model calls) per agent run (default 50)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per model call")
    parser.add_argument("--max-concurrency", type=int, default=256, help="model.max_concurrency")
    parser.add_argument("--used-limit-gib", type=float, default=16.0,
                        help="stop a run when the machine's used memory passes this")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per command")
    parser.add_argument("--keep", type=Path, help="write the runs here and keep them (default: a temp dir)")
    parser.add_argument("--warm", action="store_true",
                        help="then every row again on a warm pool (python -m harness.warm start), "
                             "started before the first and ready before each")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve_forever(args.latency, args.port)
        return
    jobs = args.jobs if args.jobs is not None else ([1, 4] if args.quick else [1, 16, 64])
    runs = args.runs if args.runs is not None else ([8] if args.quick else [64, 256])
    tasks = args.tasks or (5 if args.quick else 50)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"\n## Sweeps and one-job runs through the CLI, HTTP model at {args.latency * 1000:.0f} ms"
          f" per call, {tasks} tasks per agent run, model.max_concurrency={args.max_concurrency}\n",
          flush=True)
    options = {"tasks": tasks, "latency_s": args.latency, "max_concurrency": args.max_concurrency,
               "used_limit_gib": args.used_limit_gib, "timeout_s": args.timeout}
    with ServerProcess(args.latency) as server, contextlib.ExitStack() as stack:
        directory = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-sweep-")))
        print("each row as it is measured:\n", flush=True)
        rows = sweep_section(jobs, server=server, directory=directory, **options) if jobs else []
        rows += runs_section(runs, server=server, directory=directory, **options) if runs else []
        if args.warm:
            with WarmPoolProcess(directory) as warm:
                options.update(server=server, directory=directory, warm=warm)
                rows += sweep_section(jobs, **options) if jobs else []
                rows += runs_section(runs, **options) if runs else []
        print("\nall rows:\n")
        print(table(rows), flush=True)
        for row in rows:
            if row["status"] != "ok":
                print(f"\n{row['what']} {row['n']}: {row['status']} (logs: {directory})")
    print("\n(ideal: max(most calls in one agent run, calls / max concurrency) x latency; window: first"
          " episode start to last end;\n composed, ray, pool, checked: seconds from the command's start"
          " to each stage of its start-up (manifest.json's startup_s;\n a sweep marks no pool stage: its"
          " jobs' checks wait for the workers); first call: command start to the server's first request;"
          " peak RSS: the command's process session;\n used +GiB: peak rise of the machine's used memory;"
          " CPU: user + system of the session / model calls;\n machine load: mean 1-minute load average"
          f" during the command, on {os.cpu_count()} cores)")
    print(f"\nbench took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
