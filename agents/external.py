"""An outside agent, measured as it is: someone else's code behind the run's OpenAI-compatible
endpoint (harness/agent_run/endpoint.py).

`variant.entry=package.module:Class` builds the class in the agent run's process, once, with
`(llm, workdir, seed, **variant.options)`: `llm` has `base_url` (purpose act), `url(purpose)`,
`urls`, `api_key` and `model`. It implements `solve(task) -> str`, sync or async (a sync one runs
in a thread of its own, so the endpoint stays served), where `task` is the task as agents see it
(a dict: task_id, family, question; never the reference); in a multi-step environment
`solve(task, env)`, where `env.step(action)` returns the next observation. Optional: `learn(task,
answer, feedback)` after each task (not for replay probes or frozen runs), and `save(dir)` /
`load(dir)`, which snapshots, held-out views and restarts use; without them a snapshot keeps the
agent's `workdir`.

`variant.command=[...]` runs a process instead, any language, that speaks JSON lines on
stdin/stdout (see `Process`); its environment has HARNESS_BASE_URL, HARNESS_API_KEY, HARNESS_MODEL,
HARNESS_URLS, HARNESS_WORKDIR, HARNESS_SEED, HARNESS_OPTIONS, and OPENAI_BASE_URL / OPENAI_API_KEY
set to the run's, with no secret of the harness's environment; its stderr is appended to
`external/<run_id>.stderr.log` in the run directory (its workdir: `external/<run_id>/workdir`).

Faults stay in their episode: each fails that episode with a one-line error and the run goes on.
An exception of the outside code, an error reply of a process or a non-string answer leave the
agent as it is; what leaves it unable to answer (a task over `variant.timeout_s`, a process that
exits, prints something that is not a JSON object or no ready line) restarts it first: a new key
(a call of the abandoned task is refused), a new instance or process, reloaded from the state it
saved after its last task. In a multi-step environment the answer `solve` returns is an action
only where the environment takes a final reply (tools); in TextWorld and ScienceWorld the actions
are the `env.step` calls, and the answer is only recorded.

Outside agents are the user's code, not model-written code: they are not sandboxed, but each has
only its own workdir and its own run's key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import json
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.base import BaseAgent
from envs.base import EnvEpisode, TaskView
from envs.tool_calls import parse_text_call
from harness.agent_api import (
    AgentContext,
    Attempt,
    AttemptResult,
    Feedback,
    LearntState,
    ModelEndpoint,
    StepRow,
    Trial,
    one_line,
)

STARTUP_S = 120.0
"""How long an outside agent may take to start (a process printing its ready line, a class built),
however short `variant.timeout_s` is: its imports alone can take seconds on a busy machine."""


class OutsideAgentError(RuntimeError):
    """The outside agent failed on this task (its episode's error)."""


class OutsideAgentRestarted(OutsideAgentError):
    """The outside agent could no longer be trusted to answer (a crash, garbage, a timeout): it was
    stopped, and a new one starts for the next task."""


class OutsideModel:
    """What an in-process outside agent gets as `llm`: where its calls go, and with which key."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        self.base_url = endpoint.base_url
        self.api_key = endpoint.api_key
        self.model = endpoint.model
        self.urls = endpoint.urls()

    def url(self, purpose: str) -> str:
        """The base URL that bills `purpose` (reflect, distill, optimize, judge, ...)."""
        if purpose not in self.urls:
            raise ValueError(f"unknown purpose {purpose!r}: one of {', '.join(self.urls)}")
        return self.urls[purpose]

    def __repr__(self) -> str:  # never the key
        return f"OutsideModel(base_url={self.base_url!r}, model={self.model!r})"


class OutsideEnvironment:
    """What a multi-step outside agent acts in: `observation`, `done`, `tools` (OpenAI function
    specs, or None) and `step(action) -> observation`. In an environment with tools, an action is a
    tool call as `{"tool": name, "arguments": {...}}` (text) or a plain-text final reply."""

    def __init__(self, episode: EnvEpisode, record: Callable[..., None]) -> None:
        self._episode = episode
        self._record = record
        self.steps = 0

    @property
    def observation(self) -> str:
        return self._episode.observation

    @property
    def done(self) -> bool:
        return self._episode.done

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self._episode.tools

    def step(self, action: str) -> str:
        if not isinstance(action, str):
            raise TypeError(f"env.step takes a string action, got {type(action).__name__}")
        if self._episode.done:
            raise RuntimeError("the episode is over (env.done): no more actions")
        call = parse_text_call(action) if self._episode.tools is not None else None
        if call is None:
            return self.reply(action)
        self.steps += 1
        result = self._episode.call_tool(call)
        self._record(self.steps, call.render(), result.content, 0.0, call.name, call.arguments, result.error)
        return result.content

    def reply(self, text: str) -> str:
        """A plain-text action: a command, or in an environment with tools the final reply."""
        self.steps += 1
        outcome = self._episode.step(text)
        self._record(self.steps, text, outcome.observation, outcome.reward, None, None, None)
        return outcome.observation


class ExternalAgent(BaseAgent):
    """Hosts one outside agent for one agent run (variant=external)."""

    @classmethod
    def uses_embedder(cls, options: dict[str, Any]) -> bool:
        return True  # its endpoint serves /v1/embeddings, which the harness cannot know it will not call


    def __init__(self, context: AgentContext, entry: str | None = None, command: list[str] | None = None,
                 options: dict[str, Any] | None = None, timeout_s: float = 600.0, **base: Any) -> None:
        super().__init__(context, **base)
        if (entry is None) == (command is None):
            raise ValueError("variant=external needs one of variant.entry=package.module:Class or "
                             "variant.command=[program, args...]")
        if not timeout_s > 0:
            raise ValueError(f"variant.timeout_s must be > 0, got {timeout_s}")
        if self.max_attempts != 1 or self.memory is not None:
            raise ValueError("variant=external: the outside agent attempts and remembers on its own "
                             "(variant.max_attempts must be 1, variant.memory null)")
        self.entry = _import_entry(entry) if entry is not None else None
        # A script named relative to where the command was run from (the process runs in its workdir).
        self.command = ([_absolute(str(part)) for part in command] if command is not None else None)
        self.options = dict(options or {})
        self.timeout_s = float(timeout_s)
        self.home = context.workdir / "external" / context.run_id
        self.workdir = self.home / "workdir"
        self.state_dir = self.home / "state"
        """What the agent saved after its last task: a restart loads it."""
        self.stderr_log = self.home.with_name(f"{context.run_id}.stderr.log")
        """A process's stderr, every start of it appended (a resume's too)."""
        self._task: TaskView | None = None
        self._outside: Outside | None = None
        self._endpoint: ModelEndpoint | None = None
        self._started = False

    def gated_edits(self) -> tuple[()]:
        return ()  # an outside agent's self-edits are its own: the sealed gate cannot see them

    def export_state(self) -> dict[str, Any]:
        return {"protocol": self.protocol}  # no prompt of the harness's: it writes its own

    def import_state(self, state: dict[str, Any]) -> None:
        self.protocol = state["protocol"]

    async def run_task(self, trial: Trial) -> list[AttemptResult]:
        """One attempt: an outside agent retries, if it does, inside its own solve."""
        self._task = trial.task
        episode = trial.start_attempt()
        self.attempt = 1
        attempt = await self.solve(episode)
        return [await trial.assess(episode, attempt, None)]

    async def solve(self, episode: EnvEpisode) -> Attempt:
        """The outside agent's solve on the task in progress: its answer is the episode's (last) action."""
        assert self._task is not None
        task = self._task
        outside = await self._ready()
        stepped = episode.multi_step or episode.tools is not None
        env = OutsideEnvironment(episode, self._step_row(episode)) if stepped else None
        if env is not None and not outside.steps:
            raise OutsideAgentError(f"{outside.name} cannot act in a multi-step environment: it needs "
                                    "solve(task, env) (a process: 'step' among its ops)")
        answer = await self._guarded(outside.solve(task.model_dump(), env), "solve")
        if not isinstance(answer, str):
            raise OutsideAgentError(f"{outside.name}'s solve returned {type(answer).__name__}, not a string")
        if env is None:
            episode.step(answer)  # a single-turn task's answer is its action
            return Attempt(final_output=answer, steps=1)
        if not episode.done and episode.tools is not None:
            env.reply(answer)  # with tools, the final plain-text reply is an action too
        return Attempt(final_output=answer, steps=env.steps)

    async def learn(self, feedback: Feedback) -> None:
        outside = await self._ready()
        final = feedback.final
        if "learn" in outside.ops:
            about = {"reward": final.reward, "rewarded": final.rewarded, "response": final.response,
                     "steps": final.steps}
            await self._guarded(outside.learn(feedback.task.model_dump(), final.said, about), "learn")
        if "save" in outside.ops:  # what a restart reloads
            fresh = self.home / "state.new"
            shutil.rmtree(fresh, ignore_errors=True)
            fresh.mkdir(parents=True)
            await self._guarded(outside.save(str(fresh)), "save")
            shutil.rmtree(self.state_dir, ignore_errors=True)
            fresh.rename(self.state_dir)

    async def export_learnt(self) -> LearntState:
        outside = await self._ready()
        export = self.home / "export"
        shutil.rmtree(export, ignore_errors=True)
        if "save" in outside.ops:
            export.mkdir(parents=True)
            await self._guarded(outside.save(str(export)), "save")
        else:
            shutil.copytree(self.workdir, export)
        kept = "save" if "save" in outside.ops else "workdir"
        # No system prompt of the harness's: the outside agent writes its own prompts.
        return LearntState(state={**self.export_state(), "kept": kept}, system_prompt="", files=export)

    async def import_learnt(self, state: dict[str, Any], memory: Any | None,
                            files: Path | None = None) -> None:
        self.import_state(state)
        if files is None:
            return
        if self._started:
            raise RuntimeError("a snapshot is loaded into a fresh outside agent only")
        if state.get("kept") == "workdir":
            self._reset_home()
            shutil.copytree(files, self.workdir, dirs_exist_ok=True)
            self._started = True  # its home is the snapshot's: not emptied again
            await self._ready()
        else:
            await self._ready()
            await self._guarded(self._outside.load(str(files)), "load")  # type: ignore[union-attr]
            shutil.copytree(files, self.state_dir)

    def memory_size(self) -> int | None:
        return None

    async def close(self) -> None:
        if self._outside is not None:
            await self._outside.close()
            self._outside = None

    async def _ready(self) -> Outside:
        """The outside agent, built on first use (in the worker, never in a config check): its home
        emptied (a resumed run replays its stream from the start, as native runs do)."""
        if self._outside is not None:
            return self._outside
        if self.context.endpoint is None:
            raise RuntimeError("variant=external runs only where the harness serves its endpoint")
        if not self._started:
            self._reset_home()
            self._started = True
        self._endpoint = await self.context.endpoint()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.entry is not None:
            self._outside = InProcess(self.entry, OutsideModel(self._endpoint), self.workdir, self.seed,
                                      self.options)
        else:
            assert self.command is not None
            self._outside = Process(self.command, self._endpoint.environment(), self.workdir, self.seed,
                                    self.options, self.stderr_log)
        await self._guarded(self._outside.start(), "start", max(self.timeout_s, STARTUP_S))
        if self.state_dir.exists() and "load" in self._outside.ops:
            await self._guarded(self._outside.load(str(self.state_dir)), "load")
        return self._outside

    def _reset_home(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)
        self.workdir.mkdir(parents=True)

    async def _guarded(self, call: Any, op: str, limit_s: float | None = None) -> Any:
        """The outside call's result; over `timeout_s` (`limit_s` where given) or broken, the agent
        is restarted before its next task; the endpoint's stop (a spent budget, an unusable model)
        wins over what the outside code made of it."""
        limit_s = self.timeout_s if limit_s is None else limit_s
        try:
            result = await asyncio.wait_for(call, limit_s)
        except TimeoutError:
            await self._restart()
            bound = ("variant.timeout_s=" if limit_s == self.timeout_s else "") + f"{limit_s:g} s"
            raise OutsideAgentRestarted(f"the outside agent's {op} did not return within {bound}") from None
        except OutsideAgentRestarted:
            await self._restart()
            self._raise_stop()
            raise
        except Exception:
            self._raise_stop()
            raise
        self._raise_stop()
        return result

    def _raise_stop(self) -> None:
        stop = self._endpoint.take_stop() if self._endpoint is not None else None
        if stop is not None:
            raise stop

    async def _restart(self) -> None:
        """Stop the outside agent and take its key away; the next task starts a new one."""
        outside, self._outside = self._outside, None
        if self._endpoint is not None:
            self._endpoint.rotate_key()
        if outside is not None:
            await outside.close()

    def _step_row(self, episode: EnvEpisode) -> Callable[..., None]:
        def record(step: int, action: str, observation: str, reward: float, tool: str | None,
                   arguments: str | None, tool_error: str | None) -> None:
            self.recorder.emit(StepRow, attempt=self.attempt, step=step, action=action,
                               observation=observation[:1000], observation_chars=len(observation),
                               reward=reward, done=episode.done, prompt_tokens=0, completion_tokens=0,
                               call_id=None, tool=tool, arguments=arguments, tool_error=tool_error)

        return record


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


def _import_entry(entry: str) -> type:
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


def _absolute(part: str) -> str:
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
