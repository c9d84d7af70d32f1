"""ReasoningBank (Ouyang et al., 2025): reasoning strategies distilled from the agent's own successes
*and* failures, as a judge grades them without ground truth, and retrieved for later similar tasks.

After each task one distil call (purpose distill) turns the attempt and its verdict into up to
`max_items` memory items, each a title, a one-sentence description and one to three sentences of
content: from a success, the strategy that worked; from a failure, what went wrong and how to
avoid it. The verdict is the reward `reward_source` names; the yaml's default is the LLM judge
(`judge: {}`, `reward_source: judge`, harness/agent_run/reference_free_judge.py), which never sees
the reference, so the bank learns as it would where no answers exist, self-graded mistakes
included (episodes keep the judge's `judge_score` beside the true `score`, so the gap can be
measured).

The items live in the episodic memory's own LanceDB table (agents/memory_store.py, options in
`variant.memory`), one row each, keyed by the embedding of the question they came from (purpose
embed); the row's text is the item in its canonical form ("Title: ...\\nDescription: ...\\nContent:
..."), which `Strategy.parse` reads back. Before a task the memory's top-k items (cosine x
importance; failure-derived items weigh `variant.memory.failure_importance`) go into the task's
question turn, before the question (agents/base.py, `messages_for`); the system message stays the
same from task to task. Inserts, retrievals and evictions are memory events, and snapshots carry the
table, so resume and `variant.start_from` work as for memory.

MaTTS (memory-aware test-time scaling, `matts`): `parallel` makes `matts_k` independent attempts at
every task (the first greedy, the rest sampled) and submits the one with the highest reward, i.e.
the judge's best-of-k; `sequential` makes `matts_k` attempts, each re-examining the answers before it,
and submits the last. Either way all k attempts and their verdicts feed one contrastive distil call:
scaling buys the memory a contrast, not only the task a better answer.

Like memory's lessons, every item passes the guard: with `variant.safety` it is checked when written
and again when retrieved; with `variant.gate=sealed` each item is audited as a lesson, on probe
prompts with the items the bank would retrieve for them, without and with it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agents.base import BaseAgent, require_placeholders
from agents.memory_store import EpisodicMemory
from agents.vectors import cosine
from envs.base import EnvEpisode
from harness.agent_api import AgentContext, Attempt, AttemptResult, Feedback, Trial

Scaling = Literal["none", "parallel", "sequential"]
Admit = Callable[[str, str, list[float], float], Awaitable[bool]]

_ITEM_FORMAT = (
    "Reply with at most {max_items} memory items, no two alike, each in exactly this form:\n"
    "# Memory Item\n## Title <a short name for the strategy>\n"
    "## Description <one sentence: the tasks it applies to>\n"
    "## Content <one to three sentences: what to do, or what to avoid>"
)
SUCCESS_PROMPT = (
    "Below is a task and an attempt at it that was judged successful.\nTask: {question}\n{trajectory}\n\n"
    "First think about why the attempt succeeded. Then extract the reasoning strategies that would help "
    "on similar tasks: general ones, not this task's particular names or values.\n" + _ITEM_FORMAT
)
FAILURE_PROMPT = (
    "Below is a task and an attempt at it that was judged a failure.\nTask: {question}\n{trajectory}\n\n"
    "First reflect on why the attempt failed. Then extract the lessons: the pitfall, and the strategy "
    "that would avoid it on similar tasks: general ones, not this task's particular names or values.\n"
    + _ITEM_FORMAT
)
CONTRAST_PROMPT = (
    "Below is a task and several attempts at it, each with its verdict.\nTask: {question}\n\n{attempts}\n\n"
    "Compare the attempts: what the successful ones did that the failed ones did not, and what recurs "
    "among them (where all share one verdict, what they have in common). Then extract the reasoning "
    "strategies and pitfalls that would help on similar tasks: general ones, not this task's "
    "particular names or values.\n" + _ITEM_FORMAT
)
REEXAMINE = (
    "Your earlier answers to this question (not yet checked):\n{answers}\n"
    "Re-examine the question and these answers carefully, then give your final answer."
)
BANK_HEADER = "Strategies from your earlier tasks (use those that apply):"

# A field opens as a heading ("## Title ...", "Title:" on its own line) or inline ("**Title:** ...").
_FIELD = re.compile(r"^[ \t]*#+[ \t]*\**(title|description|content)\b\**[ \t]*:?"
                    r"|\**\b(title|description|content)\**[ \t]*:", re.IGNORECASE | re.MULTILINE)
_ITEM_HEADING = re.compile(r"^[ \t]*#*[ \t]*\**memory item\b.*$", re.IGNORECASE | re.MULTILINE)


class Strategy(BaseModel):
    """One memory item of the bank."""

    model_config = ConfigDict(frozen=True)

    title: str
    description: str
    """One sentence: the tasks it applies to."""
    content: str
    """One to three sentences: what to do, or what to avoid."""

    @property
    def text(self) -> str:
        """The canonical form: what is stored, checked, audited and shown in prompts."""
        return f"Title: {self.title}\nDescription: {self.description}\nContent: {self.content}"

    @classmethod
    def parse(cls, text: str) -> Strategy | None:
        """The item a stored text holds (its canonical form), or None."""
        items = parse_items(text)
        return items[0] if len(items) == 1 else None


def parse_items(reply: str) -> list[Strategy]:
    """The memory items in a distil reply, in order: each needs a title and content; a missing
    description becomes the content's first sentence. Markdown headings, bold field names and
    "Memory Item" lines are all read, so that small models' variations of the format count."""
    text = _ITEM_HEADING.sub("\n", reply)
    matches = list(_FIELD.finditer(text))
    found: list[dict[str, str]] = [{}]
    ends = [m.start() for m in matches[1:]] + [len(text)] if matches else []
    for match, end in zip(matches, ends, strict=True):
        name = (match.group(1) or match.group(2)).lower()
        value = " ".join(text[match.end():end].split()).strip("* ")
        if found[-1] and (name == "title" or name in found[-1]):  # the next item begins
            found.append({})
        found[-1][name] = value
    return [Strategy(title=f["title"], content=f["content"],
                     description=f.get("description") or first_sentence(f["content"]))
            for f in found if f.get("title") and f.get("content")]


def first_sentence(text: str) -> str:
    return sentences(text)[0]


def sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+", " ".join(text.split()))


def unformatted_item(reply: str, succeeded: bool) -> Strategy:
    """A reply with no readable item, as one: its first three sentences (the format's length for
    content; a small model's ramble would crowd the question out of later prompts), titled with the
    first words of the first."""
    said = sentences(reply)
    outcome = "successful" if succeeded else "failed"
    return Strategy(title=" ".join(said[0].split()[:8]), content=" ".join(said[:3]),
                    description=f"From a {outcome} attempt at a similar task.")


def bank_block(texts: list[str]) -> str:
    """Retrieved items as the question turn shows them ("" for none)."""
    return f"{BANK_HEADER}\n\n" + "\n\n".join(texts) if texts else ""


class StrategyMemory(EpisodicMemory):
    """The episodic memory (its LanceDB table, exact search, events, eviction, snapshots) holding
    strategies: a task may store several items, each as memory stores a lesson, through the same
    `admit`; prompts and the gate's probes show them titled, under BANK_HEADER."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.mode != "lessons":
            raise ValueError("variant.memory.mode must be lessons for reasoning_bank (its items are "
                             f"distilled strategies), got {self.mode!r}")
        self._pending: tuple[Strategy, float] | None = None
        """The item `remember` stores next, with its importance (`_new_item` reads it)."""

    async def store(self, strategies: list[tuple[Strategy, float]], feedback: Feedback, position: int,
                    admit: Admit | None) -> None:
        """Store each (item, importance) from this task, one `remember` each, so that each is admitted
        (safety check, sealed gate) on its own; with none, the task's recall counts are still written."""
        for pending in strategies or [None]:
            self._pending = pending
            try:
                await self.remember(feedback, position, admit)
            finally:
                self._pending = None

    async def _new_item(self, feedback: Feedback, position: int,
                        admit: Admit | None) -> dict[str, Any] | None:
        if self._pending is None:
            return None
        strategy, importance = self._pending
        vector = await self._embed(feedback.task.question)
        memory_id = uuid.uuid4().hex[:12]
        if admit is not None and not await admit(memory_id, strategy.text, vector, importance):
            return None
        return {"memory_id": memory_id, "kind": self.mode, "text": strategy.text,
                "question": feedback.task.question, "source_task_id": feedback.task.task_id,
                "source_position": position, "reward": feedback.final.reward,
                "verified": not any(a.reflection for a in feedback.attempts),
                "importance": importance, "access_count": 0, "vector": vector}

    def recalled_lessons(self) -> str:
        return bank_block([r.text for r in self.recalled])

    async def lessons_for(self, question: str,
                          candidate: tuple[str, list[float], float] | None = None) -> str:
        """The block a task with this question would be shown, with `candidate` (an item's text, its
        question's vector, its importance) stored beside the others: what the sealed gate compares.
        EpisodicMemory's ranking, this bank's block; nothing is recorded and nothing changes."""
        if question not in self._probe_vectors:
            [self._probe_vectors[question]] = await self.llm.embed([question])
        vector = self._probe_vectors[question]
        scored = [(s, row["text"], row["importance"]) for s, row in await self._ranked(vector)]
        if candidate is not None and (similarity := cosine(vector, candidate[1])) >= self.min_similarity:
            scored.append((similarity, candidate[0], candidate[2]))
        scored.sort(key=lambda item: item[0] * item[2], reverse=True)
        return bank_block([text for _, text, _ in scored[: self.top_k]])


class ReasoningBankAgent(BaseAgent):
    """Distils judged attempts into titled strategies, recalls them for similar tasks (module doc)."""

    @classmethod
    def uses_embedder(cls, options: dict[str, Any]) -> bool:
        return True  # strategies are recalled by similarity


    def __init__(self, context: AgentContext, memory: dict[str, Any] | None = None, max_items: int = 3,
                 distill_max_tokens: int = 320, fallback_item: bool = True, matts: Scaling = "none",
                 matts_k: int = 3, matts_temperature: float = 0.7, success_prompt: str | None = None,
                 failure_prompt: str | None = None, contrast_prompt: str | None = None,
                 **kwargs: Any) -> None:
        # null in the yaml: the built-in prompts
        success_prompt, failure_prompt = success_prompt or SUCCESS_PROMPT, failure_prompt or FAILURE_PROMPT
        contrast_prompt = contrast_prompt or CONTRAST_PROMPT
        if memory is None:
            raise ValueError("variant=reasoning_bank needs a variant.memory section (where its items live)")
        if memory.get("distill_prompt"):
            raise ValueError("variant.memory.distill_prompt is memory's; reasoning_bank distils with "
                             "variant.success_prompt, failure_prompt and contrast_prompt")
        if matts not in ("none", "parallel", "sequential"):
            raise ValueError(f"variant.matts must be none, parallel or sequential, got {matts!r}")
        if matts_k < 2 or max_items < 1 or distill_max_tokens < 1 or matts_temperature < 0:
            raise ValueError("variant.matts_k must be >= 2, max_items and distill_max_tokens >= 1, "
                             "matts_temperature >= 0")
        if matts != "none" and kwargs.get("max_attempts", 1) > 1:
            raise ValueError("variant.matts makes matts_k attempts at every task: leave max_attempts at 1")
        require_placeholders("variant.success_prompt", success_prompt, "question", "trajectory")
        require_placeholders("variant.failure_prompt", failure_prompt, "question", "trajectory")
        require_placeholders("variant.contrast_prompt", contrast_prompt, "question", "attempts")
        super().__init__(context, **kwargs)
        self.bank = StrategyMemory(self.llm, context.recorder, directory=context.workdir / "memory",
                                   table=context.run_id, **memory)
        self.memory = self.bank  # what the base agent recalls from, shows, snapshots and restores
        self.max_items = max_items
        self.distill_max_tokens = distill_max_tokens
        self.fallback_item = fallback_item
        self.matts: Scaling = matts
        self.matts_k = matts_k
        self.matts_temperature = matts_temperature
        self.success_prompt = success_prompt
        self.failure_prompt = failure_prompt
        self.contrast_prompt = contrast_prompt
        self.earlier: list[str] = []
        """This task's answers so far, which a sequential MaTTS attempt re-examines."""

    async def run_task(self, trial: Trial) -> list[AttemptResult]:
        self.earlier = []
        if self.matts == "none":
            return await super().run_task(trial)
        await self.bank.recall(trial.task, screen=self.guard.screen if self.guard.safety else None)
        results: list[AttemptResult] = []
        # One after another, not at once: each attempt's calls are labelled with its number.
        for number in range(1, self.matts_k + 1):
            episode = trial.start_attempt()
            self.attempt = number
            results.append(await trial.assess(episode, await self.solve(episode), None))
            self.earlier.append(results[-1].said or "(no answer)")
        if self.matts == "parallel":  # best-of-k by the reward the agent is told; the first of equals
            best = max(results, key=lambda r: r.reward)
            results = [*(r for r in results if r is not best), best]  # the last one is the submitted one
        return results

    async def solve(self, episode: EnvEpisode) -> Attempt:
        context, params = "", {}
        if self.matts == "sequential" and self.earlier:
            answers = "\n".join(f"- {answer}" for answer in self.earlier)
            context = REEXAMINE.format(answers=answers)
        elif self.matts == "parallel" and self.attempt > 1:  # independent draws; the first stays greedy
            params = self.sampling(self.matts_temperature)
        return await self.act(episode, self.messages_for(episode.observation, task_context=context), **params)

    async def learn(self, feedback: Feedback) -> None:
        await self.bank.store(await self.distill(feedback), feedback, self.stream_position,
                              admit=self._admit_lesson)

    async def distill(self, feedback: Feedback) -> list[tuple[Strategy, float]]:
        """The items this task teaches, each with its retrieval weight: one attempt is distilled as a
        success or a failure, several (MaTTS, retries) by contrasting them in one call."""
        task, attempts = feedback.task, sorted(feedback.attempts, key=lambda a: a.number)
        succeeded = any(a.rewarded for a in attempts)
        if len(attempts) > 1:
            listing = "\n\n".join(f"Attempt {a.number} ({verdict(a)}):\n{trajectory(a)}" for a in attempts)
            prompt = self.contrast_prompt.format(question=task.question, attempts=listing,
                                                 max_items=self.max_items)
        else:
            template = self.success_prompt if succeeded else self.failure_prompt
            prompt = template.format(question=task.question, trajectory=trajectory(attempts[0]),
                                     max_items=self.max_items)
        reply = (await self.llm.complete([{"role": "user", "content": prompt}], purpose="distill",
                                         max_tokens=self.distill_max_tokens)).text
        items = parse_items(reply)[: self.max_items]
        if not items and self.fallback_item and reply.strip():
            items = [unformatted_item(reply, succeeded)]
        importance = 1.0 if succeeded else self.bank.failure_importance
        return [(item, importance) for item in items]


def verdict(attempt: AttemptResult) -> str:
    return "succeeded" if attempt.rewarded else "failed"


def trajectory(attempt: AttemptResult) -> str:
    """An attempt as a distil prompt shows it: its final answer, and how many actions it took."""
    actions = f" (after {attempt.steps} actions)" if attempt.steps > 1 else ""
    return f"Final answer{actions}: {attempt.said or '(no answer)'}"
