"""How the host (agents/external.py) drives an outside agent: a class built in this process
(`InProcess`) or a process speaking JSON lines on stdin/stdout (`Process`), and the faults that fail
a task (`OutsideAgentError`) or restart the agent (`OutsideAgentRestarted`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.outside_handles import OutsideEnvironment, OutsideModel
from harness.agent_api import one_line

STARTUP_S = 120.0
"""How long an outside agent may take to start (a process printing its ready line, a class built),
however short `variant.timeout_s` is: its imports alone can take seconds on a busy machine."""


class OutsideAgentError(RuntimeError):
    """The outside agent failed on this task (its episode's error)."""


class OutsideAgentRestarted(OutsideAgentError):
    """The outside agent could no longer be trusted to answer (a crash, garbage, a timeout): it was
    stopped, and a new one starts for the next task."""


class Outside:
    """One outside agent as the host drives it, in-process or a process."""

    name: str
    ops: set[str]
    """Which of learn, save and load it has."""
    steps: bool
    """It acts in multi-step environments."""

    async def start(self) -> None: ...

    async def solve(self, task: dict[str, Any], env: OutsideEnvironment | None) -> Any: ...

    async def learn(self, task: dict[str, Any], answer: str | None, feedback: dict[str, Any]) -> None: ...

    async def save(self, directory: str) -> None: ...

    async def load(self, directory: str) -> None: ...

    async def close(self) -> None: ...


class InProcess(Outside):
    """A class built in this process; its sync methods run in a thread of its own."""

    def __init__(self, cls: type, llm: OutsideModel, workdir: Path, seed: int,
                 options: dict[str, Any]) -> None:
        self.cls, self.llm, self.workdir, self.seed, self.options = cls, llm, workdir, seed, options
        self.name = f"{cls.__module__}.{cls.__qualname__}"
        self.ops = {op for op in ("learn", "save", "load") if callable(getattr(cls, op, None))}
        self.steps = _positional_parameters(cls.solve) >= 2
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="outside-agent")
        self._instance: Any = None

    async def start(self) -> None:
        self._instance = await self._run(self.cls, self.llm, str(self.workdir), self.seed, **self.options)

    async def solve(self, task: dict[str, Any], env: OutsideEnvironment | None) -> Any:
        return await self._run(self._instance.solve, task, *([env] if env is not None else []))

    async def learn(self, task: dict[str, Any], answer: str | None, feedback: dict[str, Any]) -> None:
        await self._run(self._instance.learn, task, answer, feedback)

    async def save(self, directory: str) -> None:
        await self._run(self._instance.save, directory)

    async def load(self, directory: str) -> None:
        await self._run(self._instance.load, directory)

    async def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)  # a hung call is abandoned, not joined

    async def _run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            if inspect.iscoroutinefunction(function):
                return await function(*args, **kwargs)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._thread, lambda: function(*args, **kwargs))
        except (OutsideAgentError, asyncio.CancelledError):
            raise
        except Exception as error:
            raise OutsideAgentError(f"{self.name}.{getattr(function, '__name__', 'call')} raised "
                                    f"{_where(error)}") from error


class Process(Outside):
    """A program speaking JSON lines: it prints `{"ready": true, "ops": [...]}` first (ops among
    solve, learn, save, load and step, the last for multi-step environments), then answers each
    request line with one line:

    - `{"op": "solve", "task": {...}, "env": null | {"observation": ..., "tools": ...}}` ->
      `{"answer": "..."}`; with an env, before answering, `{"op": "step", "action": "..."}` lines,
      each answered `{"observation": "...", "done": false}`;
    - `{"op": "learn", "task": ..., "answer": ..., "feedback": {...}}`, `{"op": "save", "dir": ...}`,
      `{"op": "load", "dir": ...}` -> `{"ok": true}`;
    - any request -> `{"error": "...", "traceback": "..."}` when it failed.
    Closing its stdin asks it to exit."""

    READY_S = STARTUP_S

    def __init__(self, command: list[str], environment: dict[str, str], workdir: Path, seed: int,
                 options: dict[str, Any], stderr: Path) -> None:
        self.command, self.workdir, self.stderr = command, workdir, stderr
        self.environment = {**environment, "HARNESS_WORKDIR": str(workdir), "HARNESS_SEED": str(seed),
                            "HARNESS_OPTIONS": json.dumps(options)}
        self.name = f"the outside agent's process ({Path(command[0]).name})"
        self.ops: set[str] = set()
        self.steps = False
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with open(self.stderr, "ab") as log:
            try:
                self._process = await asyncio.create_subprocess_exec(
                    *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
                    cwd=self.workdir, env=self.environment, limit=64 * 1024 * 1024, start_new_session=True)
            except OSError as error:
                raise OutsideAgentRestarted(f"variant.command could not start: {one_line(error)}") from None
        try:
            ready = await asyncio.wait_for(self._read(), self.READY_S)
        except TimeoutError:
            raise OutsideAgentRestarted(f"{self.name} printed no ready line within {self.READY_S:g} s"
                                        ) from None
        if ready.get("ready") is not True or not isinstance(ready.get("ops", []), list):
            raise OutsideAgentRestarted(f"{self.name} did not say it is ready ({{\"ready\": true, \"ops\": "
                                        f"[...]}}), it said {json.dumps(ready)[:200]}")
        self.ops = {op for op in ready.get("ops", ["solve"]) if op in ("learn", "save", "load")}
        self.steps = "step" in ready.get("ops", [])

    async def solve(self, task: dict[str, Any], env: OutsideEnvironment | None) -> Any:
        seen = {"observation": env.observation, "tools": env.tools} if env is not None else None
        await self._write({"op": "solve", "task": task, "env": seen})
        while True:
            reply = await self._read()
            if reply.get("op") != "step":
                return self._answer(reply, "solve").get("answer")
            if env is None:
                raise OutsideAgentRestarted(f"{self.name} asked to step a single-turn task")
            try:
                observation = env.step(reply.get("action"))  # type: ignore[arg-type]
            except (TypeError, RuntimeError) as error:
                await self._write({"error": one_line(error)})
                continue
            await self._write({"observation": observation, "done": env.done})

    async def learn(self, task: dict[str, Any], answer: str | None, feedback: dict[str, Any]) -> None:
        await self._request({"op": "learn", "task": task, "answer": answer, "feedback": feedback})

    async def save(self, directory: str) -> None:
        await self._request({"op": "save", "dir": directory})

    async def load(self, directory: str) -> None:
        await self._request({"op": "load", "dir": directory})

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        try:
            assert process.stdin is not None
            process.stdin.close()
            await asyncio.wait_for(process.wait(), 5)
        except (TimeoutError, OSError):
            process.kill()
            await process.wait()

    async def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        await self._write(request)
        return self._answer(await self._read(), request["op"])

    def _answer(self, reply: dict[str, Any], op: str) -> dict[str, Any]:
        if "error" in reply:
            raise OutsideAgentError(f"{self.name}'s {op} failed: {_last_line(reply.get('traceback'))}"
                                    f"{one_line(str(reply['error']))}")
        if op == "solve" and "answer" not in reply:
            shown = json.dumps(reply)[:200]
            raise OutsideAgentRestarted(f"{self.name} answered solve without an answer: {shown}")
        return reply

    async def _write(self, message: dict[str, Any]) -> None:
        process = self._running()
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")
            await process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise OutsideAgentRestarted(await self._exited()) from None

    async def _read(self) -> dict[str, Any]:
        process = self._running()
        assert process.stdout is not None
        try:
            line = await process.stdout.readline()
        except ValueError:  # longer than the stream's limit
            raise OutsideAgentRestarted(f"{self.name} printed a line over 64 MiB") from None
        if not line:
            raise OutsideAgentRestarted(await self._exited())
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            shown = line.decode(errors="replace").strip()[:200]
            raise OutsideAgentRestarted(f"{self.name} printed something that is not a JSON object: {shown!r}")
        return reply

    def _running(self) -> asyncio.subprocess.Process:
        if self._process is None:
            raise OutsideAgentRestarted(f"{self.name} is not running")
        return self._process

    async def _exited(self) -> str:
        process = self._running()
        code = await process.wait()
        return f"{self.name} exited with code {code}{_stderr_tail(self.stderr)}"


def import_entry(entry: str) -> type:
    module_name, colon, name = entry.partition(":")
    if not colon or not module_name or not name:
        raise ValueError(f"variant.entry must be package.module:Class, got {entry!r}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.append(str(Path.cwd()))  # where the user ran from, as `python -m` would import it
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"variant.entry: cannot import {module_name} ({one_line(error)})") from None
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise ValueError(f"variant.entry: {module_name} has no class {name}")
    if not callable(getattr(cls, "solve", None)):
        raise ValueError(f"variant.entry: {entry} has no solve(task) method")
    return cls


def absolute_command_part(part: str) -> str:
    """A command's argument; an existing file named by a relative path, made absolute."""
    relative = not Path(part).is_absolute() and not part.startswith("-") and Path(part).is_file()
    return str(Path(part).resolve()) if relative else part


def _positional_parameters(function: Callable[..., Any]) -> int:
    parameters = list(inspect.signature(function).parameters.values())
    if parameters and parameters[0].name == "self":
        parameters = parameters[1:]
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _where(error: BaseException) -> str:
    """`Type: message (file:line in function)` of the innermost frame of the outside code."""
    frames = traceback.extract_tb(error.__traceback__)
    place = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(error).__name__}: {one_line(str(error))}{place}"


def _last_line(text: Any) -> str:
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip().startswith("File ")]
    return f"{lines[-1]}: " if lines else ""


def _stderr_tail(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f" (its stderr ends: {one_line(lines[-1])[:300]})" if lines else ""
