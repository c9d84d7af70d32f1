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
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.base import BaseAgent
from agents.outside_handles import OutsideEnvironment, OutsideModel
from agents.outside_transports import (
    STARTUP_S,
    InProcess,
    Outside,
    OutsideAgentError,
    OutsideAgentRestarted,
    Process,
    absolute_command_part,
    import_entry,
)
from envs.base import EnvEpisode, TaskView
from harness.agent_api import (
    AgentContext,
    Attempt,
    AttemptResult,
    Feedback,
    LearntState,
    ModelEndpoint,
    StepRow,
    Trial,
)


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
        self.entry = import_entry(entry) if entry is not None else None
        # A script named relative to where the command was run from (the process runs in its workdir).
        self.command = [absolute_command_part(str(part)) for part in command] if command is not None else None
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
