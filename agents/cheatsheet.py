"""Cheatsheet: a bounded, self-curated cheatsheet carried across tasks (Dynamic Cheatsheet, Suzgun
et al., 2025).

Two modes (`variant.mode`):
- `cumulative` (DC-Cu): one cheatsheet for the whole stream, in the system message (it changes only
  when curated, so it belongs to the prompt's stable part: agents/base.py, `messages_for`). After
  each task a curator call (purpose curate) rewrites it whole from the task, the answer given, the
  outcome the agent is told (truth or judge, by `reward_source`) and the previous cheatsheet.
- `retrieval_synthesis` (DC-RS): the agent keeps its past tasks with their answers and outcomes
  (`capacity` of them, oldest dropped first), keyed by the embedding of the question (purpose
  embed). Before each task the `top_k` most similar are retrieved and a synthesis call (purpose
  curate) writes a cheatsheet for this task alone, which goes into the question's turn, before it.
  (The paper's DC-RS also feeds the previous task's cheatsheet to the synthesis; here each task's
  cheatsheet depends only on the stored past tasks, so a replay probe, which must not teach the
  agent, cannot change what the next task sees.)

Either way the cheatsheet is bounded: the curator is asked for at most `max_words` words and
whatever lies beyond them is cut (whole lines first), a `prune` event recording what was cut. The
curator replies between <cheatsheet> tags; a reply without them is taken whole (`accept_untagged`)
so that a model too small for the format still writes one, or ignored (DC's own rule).

Code: a ```python block in the cheatsheet that defines `tool(question) -> str` is a solver. With
`run_code` it runs in the sandbox (harness/sandbox/, as tool_learning's tools do) on each task's
question, at most MAX_SOLVERS of them, and what it returns is shown before the question ("a solver
in your cheatsheet returned ..."); every run is a `tool_events` row (used or failed).

Every change passes the guard (kind bullet, the nearest of the edit kinds): a DC-Cu rewrite and a
DC-RS past task are checked for safety when written and, with `variant.gate=sealed`, audited by the
sealed gate on the probe prompts without and with them; a cheatsheet is checked again before it
first goes into a prompt (DC-Cu: once per version; DC-RS: each synthesised one). Changes are rows of
`playbook_events`, whose shape fits: bullet_id `cheatsheet` (section `cheatsheet`) for the
cheatsheet itself (add, edit, prune, rejected), `t<n>` (section `past_tasks`) for a DC-RS past task
(add, used with its similarity when retrieved, remove when dropped, rejected).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from pydantic import BaseModel

from agents.base import BaseAgent, require_placeholders
from agents.tool_learning import check_tool_code
from agents.vectors import cosine
from envs.base import EnvEpisode, TaskView
from harness.agent_api import (
    AgentContext,
    Attempt,
    AttemptResult,
    Feedback,
    GateKind,
    Opening,
    PlaybookEventRow,
    Render,
    Sandbox,
    ToolEventRow,
    Trial,
)

Mode = Literal["cumulative", "retrieval_synthesis"]

CURATE_PROMPT = (
    "You keep a cheatsheet: short, reusable notes (strategies, formulas, pitfalls, answer formats, code) "
    "that help solve tasks like the ones you meet.\nCurrent cheatsheet:\n{cheatsheet}\n\n"
    "Latest task: {question}\nAnswer given: {answer}\nOutcome: {outcome}\n\n"
    "Rewrite the whole cheatsheet: keep what still helps, add what this task taught, drop what misled; "
    "at most {max_words} words. A reusable solver may be a ```python block defining "
    "`tool(question: str) -> str` (standard library only): it will be run on later questions and its "
    "result shown to you. Reply with the new cheatsheet between <cheatsheet> and </cheatsheet>."
)
SYNTHESIZE_PROMPT = (
    "Write a cheatsheet for the task below from your past tasks like it: short notes (strategies, "
    "formulas, pitfalls, answer formats, code) that will help with it, at most {max_words} words. A "
    "reusable solver may be a ```python block defining `tool(question: str) -> str` (standard library "
    "only): it will be run on the task and its result shown to you.\n\nPast tasks:\n{past_tasks}\n\n"
    "Task: {question}\n\nReply with the cheatsheet between <cheatsheet> and </cheatsheet>."
)
HEADINGS: dict[Mode, str] = {
    "cumulative": "Cheatsheet (your own notes from earlier tasks):",
    "retrieval_synthesis": "Cheatsheet (your notes for this task, from earlier ones):"}
MAX_SOLVERS = 2
"""Solvers in one cheatsheet run per task (each is a sandboxed process of up to `sandbox.wall_s`)."""
_MEMO = 256
"""Entries of each memo (question vectors, syntheses, solver results): the gate renders the same probe
questions at every audit, and must not embed, synthesise or run the sandbox for them again."""
_TAGGED = re.compile(r"<cheatsheet>(.*?)(?:</cheatsheet>|\Z)", re.DOTALL | re.IGNORECASE)
_CODE_BLOCKS = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


class PastTask(BaseModel):
    """A DC-RS memory entry: a task the agent did, its answer and the outcome it was told."""

    entry_id: str
    question: str
    answer: str
    rewarded: bool
    vector: list[float]
    position: int
    """Stream position of the task."""

    def listing(self) -> str:
        outcome = "correct" if self.rewarded else "incorrect"
        return f"Task: {self.question}\nAnswer given: {self.answer}\nOutcome: {outcome}"


def parse_cheatsheet(reply: str, accept_untagged: bool) -> str | None:
    """The cheatsheet in a curator's reply: between the tags (the closing one may have been cut off
    by the token limit), else the whole reply with `accept_untagged`; None for nothing usable."""
    match = _TAGGED.search(reply)
    text = match.group(1) if match else (reply if accept_untagged else "")
    return text.strip() or None


def bounded(text: str, max_words: int) -> tuple[str, str]:
    """The text cut to `max_words` words (whitespace-separated): whole lines while they fit, then as
    many words of the next line as still fit. Returns what is kept and what was cut ("" if none)."""
    kept: list[str] = []
    used = 0
    lines = text.splitlines()
    for index, line in enumerate(lines):
        words = line.split()
        if used + len(words) <= max_words:
            kept.append(line)
            used += len(words)
            continue
        room = max_words - used
        indent = line[: len(line) - len(line.lstrip())]
        if room > 0:
            kept.append(indent + " ".join(words[:room]))
        cut = [" ".join(words[room:]) if room > 0 else line, *lines[index + 1:]]
        return "\n".join(kept).rstrip(), "\n".join(cut).strip()
    return text, ""


def solvers(text: str) -> list[str]:
    """The code blocks of a cheatsheet that can run as a solver (they parse and define tool(question))."""
    blocks = (block.strip() for block in _CODE_BLOCKS.findall(text))
    return [code for code in blocks if check_tool_code(code) is None][:MAX_SOLVERS]


def _hint(value: str | None) -> str:
    return f"A solver in your cheatsheet returned: {value}"


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    """Keep a value in a memo of at most _MEMO entries, the oldest dropped first."""
    memo[key] = value
    while len(memo) > _MEMO:
        del memo[next(iter(memo))]


class CheatsheetAgent(BaseAgent):
    @classmethod
    def uses_embedder(cls, options: dict[str, Any]) -> bool:
        """DC-RS retrieves its past tasks by similarity; DC-Cu keeps one cheatsheet."""
        return options.get("mode") == "retrieval_synthesis" or super().uses_embedder(options)

    def __init__(self, context: AgentContext, mode: Mode = "cumulative", max_words: int = 400,
                 top_k: int = 3, capacity: int = 200, accept_untagged: bool = True,
                 curate_max_tokens: int = 768, curate_prompt: str | None = None,
                 synthesize_prompt: str | None = None, run_code: bool = True,
                 sandbox: dict[str, Any] | None = None, **kwargs: Any) -> None:
        curate_prompt = curate_prompt or CURATE_PROMPT  # null in the yaml: the built-in prompt
        synthesize_prompt = synthesize_prompt or SYNTHESIZE_PROMPT  # likewise
        super().__init__(context, **kwargs)
        if mode not in ("cumulative", "retrieval_synthesis"):
            raise ValueError(f"variant.mode must be cumulative or retrieval_synthesis, got {mode!r}")
        if max_words < 1 or top_k < 1 or capacity < 1 or curate_max_tokens < 1:
            raise ValueError("variant.max_words, top_k, capacity and curate_max_tokens must be >= 1")
        require_placeholders("variant.curate_prompt", curate_prompt,
                             "cheatsheet", "question", "answer", "outcome")
        require_placeholders("variant.synthesize_prompt", synthesize_prompt, "past_tasks", "question")
        self.mode: Mode = mode
        self.max_words = max_words
        self.top_k = top_k
        self.capacity = capacity
        self.accept_untagged = accept_untagged
        self.curate_max_tokens = curate_max_tokens
        self.curate_prompt = curate_prompt
        self.synthesize_prompt = synthesize_prompt
        # Built only when code runs: a sandbox refuses to exist where kernel isolation is missing
        # (unless `sandbox.weak`), and a cheatsheet without code execution needs none.
        self.sandbox = Sandbox(**(sandbox or {})) if run_code else None
        self.cheatsheet = ""
        """DC-Cu: the cheatsheet, as the system message shows it."""
        self.past_tasks: list[PastTask] = []
        """DC-RS: the tasks the cheatsheet of a new one is synthesised from, oldest first."""
        self.next_id = 1
        self._screened: dict[str, bool] = {}  # cheatsheet text -> allowed by the retrieval check
        self._shown = ""  # the cheatsheet of the task in progress
        self._hints = ""  # what its solvers returned on the task's question
        self._vectors: dict[str, list[float]] = {}  # question -> embedding
        self._syntheses: dict[tuple[str, tuple[str, ...]], tuple[str, str]] = {}  # -> (sheet, cut)
        self._solved: dict[tuple[str, str], str] = {}  # (code digest, question) -> hint

    def gated_edits(self) -> tuple[GateKind, ...]:
        return ("bullet", *super().gated_edits())

    # Acting -------------------------------------------------------------------------------------

    async def run_task(self, trial: Trial) -> list[AttemptResult]:
        """The task's cheatsheet (DC-Cu: the current one; DC-RS: synthesised for it), screened, and
        its solvers' results, once per task (every attempt and step shows the same)."""
        task = trial.task
        if self.mode == "cumulative":
            sheet = self.cheatsheet
        else:
            sheet = await self._synthesize(task.question, self.past_tasks, record=True)
        self._shown = sheet if sheet and await self._allowed(sheet) else ""
        self._hints = await self._solver_hints(self._shown, task, record=True)
        return await super().run_task(trial)

    async def solve(self, episode: EnvEpisode) -> Attempt:
        system, context = self._placed(self._shown, self._hints)
        return await self.act(episode, self.messages_for(episode.observation, system, task_context=context))

    def _placed(self, sheet: str, hints: str) -> tuple[str, str]:
        """Where the cheatsheet goes, as (system prompt, the question turn's context): DC-Cu's in the
        system message (stable from task to task while it stands), DC-RS's, made for this task, in
        the question's turn; solver results always there, since they are the question's own."""
        listing = f"{HEADINGS[self.mode]}\n{sheet}" if sheet else ""
        if self.mode == "cumulative":
            return (f"{self.system_prompt}\n\n{listing}" if listing else self.system_prompt), hints
        return self.system_prompt, "\n\n".join(block for block in (listing, hints) if block)

    async def _allowed(self, sheet: str) -> bool:
        """The retrieval-time safety check, once per cheatsheet text."""
        if self.guard.safety is None:
            return True
        if sheet not in self._screened:
            _remember(self._screened, sheet, await self.guard.screen("bullet", "cheatsheet", sheet))
        return self._screened[sheet]

    async def _solver_hints(self, sheet: str, task: TaskView, record: bool) -> str:
        """What the cheatsheet's solvers return on the question, run in the sandbox (recorded as
        tool_events for the agent's own tasks, not for the gate's probes)."""
        if self.sandbox is None or not sheet:
            return ""
        hints = []
        for code in solvers(sheet):
            key = (hashlib.sha256(code.encode()).hexdigest(), task.question)
            if record or key not in self._solved:
                result = await self.sandbox.arun(code, task.question)
                if record:
                    self.recorder.emit(ToolEventRow, event="used" if result.ok else "failed",
                                       tool_id=f"cheatsheet:{key[0][:12]}", family=task.family,
                                       code=code[:4000], output=result.value[:500] if result.value else None,
                                       error=result.error, isolation=self.sandbox.isolation)
                _remember(self._solved, key, _hint(result.value) if result.ok else "")
            hints.append(self._solved[key])
        return "\n".join(hint for hint in hints if hint)

    # Learning -----------------------------------------------------------------------------------

    async def learn(self, feedback: Feedback) -> None:
        await super().learn(feedback)
        if self.mode == "cumulative":
            await self._curate(feedback)
        else:
            await self._store(feedback)

    async def _curate(self, feedback: Feedback) -> None:
        """DC-Cu: the curator rewrites the cheatsheet; the rewrite, cut to the word budget, takes
        effect if the guard admits it."""
        final = feedback.final
        prompt = self.curate_prompt.format(
            cheatsheet=self._shown or "(empty)", question=feedback.task.question,
            answer=final.said or "(no answer)", outcome="correct" if final.rewarded else "incorrect",
            max_words=self.max_words)
        reply = (await self.llm.complete([{"role": "user", "content": prompt}], purpose="curate",
                                         max_tokens=self.curate_max_tokens)).text
        proposed = parse_cheatsheet(reply, self.accept_untagged)
        if proposed is None:
            return
        sheet, cut = bounded(proposed, self.max_words)
        if sheet == self.cheatsheet:
            return
        edit_id = f"cheatsheet@{self.stream_position}"
        if not await self.guard.admit("bullet", edit_id, sheet, self._render_cumulative(self.cheatsheet),
                                      self._render_cumulative(sheet)):
            self._event("rejected", "cheatsheet", sheet)
            return
        self._event("edit" if self.cheatsheet else "add", "cheatsheet", sheet)
        if cut:
            self._event("prune", "cheatsheet", cut)
        self.cheatsheet = sheet

    async def _store(self, feedback: Feedback) -> None:
        """DC-RS: keep the task, its answer and outcome for later syntheses, if the guard admits it."""
        task, final = feedback.task, feedback.final
        entry = PastTask(entry_id=f"t{self.next_id}", question=task.question,
                         answer=final.said or "(no answer)", rewarded=final.rewarded,
                         vector=await self._vector(task.question), position=self.stream_position)
        self.next_id += 1
        candidate = [*self.past_tasks, entry]
        if not await self.guard.admit("bullet", entry.entry_id, entry.listing(),
                                      self._render_synthesis(self.past_tasks),
                                      self._render_synthesis(candidate)):
            self._event("rejected", entry.entry_id, entry.listing(), section="past_tasks")
            return
        self._event("add", entry.entry_id, entry.listing(), section="past_tasks")
        while len(candidate) > self.capacity:
            dropped = candidate.pop(0)
            self._event("remove", dropped.entry_id, dropped.listing(), section="past_tasks")
        self.past_tasks = candidate

    async def _synthesize(self, question: str, past: list[PastTask], record: bool) -> str:
        """DC-RS: a cheatsheet for this question from the most similar past tasks ("" with none).
        Remembered by question and entries, so the gate's probes do not write one twice."""
        if not past:
            return ""
        vector = await self._vector(question)
        ranked = sorted(((cosine(vector, p.vector), p) for p in past),
                        key=lambda pair: (-pair[0], pair[1].position))  # equally near: the older first
        nearest = ranked[: self.top_k]
        if record:
            for similarity, entry in nearest:
                self._event("used", entry.entry_id, entry.listing(), section="past_tasks",
                            similarity=similarity)
        key = (question, tuple(entry.entry_id for _, entry in nearest))
        if key not in self._syntheses:
            prompt = self.synthesize_prompt.format(
                past_tasks="\n\n".join(entry.listing() for _, entry in nearest), question=question,
                max_words=self.max_words)
            reply = (await self.llm.complete([{"role": "user", "content": prompt}], purpose="curate",
                                             max_tokens=self.curate_max_tokens)).text
            _remember(self._syntheses, key,
                      bounded(parse_cheatsheet(reply, self.accept_untagged) or "", self.max_words))
        sheet, cut = self._syntheses[key]
        if record and sheet:
            self._event("edit", "cheatsheet", sheet)
            if cut:
                self._event("prune", "cheatsheet", cut)
        return sheet

    async def _vector(self, question: str) -> list[float]:
        """The question's embedding, once per question (a task's is asked for again when it is
        stored, a probe's at every audit)."""
        if question not in self._vectors:
            [vector] = await self.llm.embed([question])
            _remember(self._vectors, question, vector)
        return self._vectors[question]

    # What the gate's probes see -------------------------------------------------------------------

    def _render_cumulative(self, sheet: str) -> Render:
        """A probe's prompt with this DC-Cu cheatsheet (and no lessons): in the system message,
        its solvers' results on the probe's question before it."""
        async def opening(view: TaskView) -> Opening:
            return await self._probe_opening(sheet, view)

        return opening

    def _render_synthesis(self, past: list[PastTask]) -> Render:
        """A probe's prompt with the cheatsheet these past tasks would synthesise for its question."""
        async def opening(view: TaskView) -> Opening:
            return await self._probe_opening(await self._synthesize(view.question, past, record=False), view)

        return opening

    async def _probe_opening(self, sheet: str, view: TaskView) -> Opening:
        shown = sheet if sheet and await self._allowed(sheet) else ""
        system, context = self._placed(shown, await self._solver_hints(shown, view, record=False))
        return self.opening(system, task_context=context)

    # Events and state ---------------------------------------------------------------------------

    def _event(self, kind: str, item_id: str, text: str, section: str = "cheatsheet",
               similarity: float | None = None) -> None:
        self.recorder.emit(PlaybookEventRow, event=kind, bullet_id=item_id, section=section, text=text,
                           helpful=0, harmful=0, similarity=similarity)

    def memory_size(self) -> int | None:
        kept = len(self.past_tasks) if self.mode == "retrieval_synthesis" else int(bool(self.cheatsheet))
        return kept + (super().memory_size() or 0)

    def export_state(self) -> dict[str, Any]:
        return {**super().export_state(), "mode": self.mode, "cheatsheet": self.cheatsheet,
                "next_id": self.next_id, "past_tasks": [p.model_dump() for p in self.past_tasks]}

    def import_state(self, state: dict[str, Any]) -> None:
        super().import_state(state)
        self.cheatsheet = state.get("cheatsheet", "")
        self.past_tasks = [PastTask(**p) for p in state.get("past_tasks", [])]
        self.next_id = state.get("next_id", len(self.past_tasks) + 1)
