"""Playbook: an evolving context of itemised bullets (ACE, Agentic Context Engineering, 2025).

The agent acts with its playbook in the system prompt: bullets of three sections (strategies,
pitfalls, formats), each with an id and helpful / harmful counters. After each task:
1. a reflector call (purpose reflect) reads the outcome (truth or judge, by `reward_source`) and
   replies with an INSIGHT and the ids of the bullets that HELPED or were HARMFUL; the counters
   follow those tags;
2. a curator call (purpose curate) turns the insight into a *delta*: `ADD <section>: text`,
   `EDIT <id>: text`, `REMOVE <id>` lines (or NONE). A reply with no operation adds the insight
   itself as a strategy (`fallback_add`), so a model too small to follow the format still builds
   a playbook;
3. the delta is merged deterministically: an added bullet whose embedding is at least
   `merge_similarity` (cosine) from a bullet already there is merged into it, not appended (the
   vectors are kept in the run's LanceDB table, playbook/<run_id>); then, while the playbook is
   over `max_words`, the bullet with the lowest helpful minus harmful (then the oldest) is pruned
   ("grow and refine").
The playbook is never rewritten whole, which is how ACE avoids context collapse. With
`variant.gate=sealed` a delta takes effect only if the sealed gate accepts the playbook with it
over the playbook without it (harness/agent_run/gate.py); with `variant.safety` every added or edited bullet
is checked when written, and each bullet again before it first goes into a prompt after a change.
Every change is a row of `playbook_events`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel

from agents.base import BaseAgent, require_placeholders
from agents.vectors import compact_table, cosine
from envs.base import EnvEpisode, TaskView
from harness.agent_api import AgentContext, Attempt, Feedback, GateKind, Opening, PlaybookEventRow, Render

SECTIONS = ("strategies", "pitfalls", "formats")
REFLECT_PROMPT = (
    "You are reviewing an attempt at a task.\nTask: {question}\nAnswer given: {answer}\nOutcome: {outcome}\n"
    "Playbook bullets that were in the prompt:\n{bullets}\n\n"
    "Reply in exactly this form:\nINSIGHT: <one sentence: what to do, or avoid, on similar tasks>\n"
    "HELPFUL: <ids of bullets that helped, or none>\nHARMFUL: <ids of bullets that misled, or none>"
)
CURATE_PROMPT = (
    "You maintain a playbook of short bullets for tasks like this one: {question}\n"
    "Current playbook:\n{bullets}\n\nNew insight: {insight}\n\n"
    "Reply with changes only, one per line, in these forms:\nADD <strategies|pitfalls|formats>: <text>\n"
    "EDIT <id>: <new text>\nREMOVE <id>\nor NONE if the playbook already covers the insight."
)
_ADD = re.compile(r"^\W*ADD\b\s*\[?(strategies|pitfalls|formats)?\]?\s*:\s*(.+)$", re.IGNORECASE)
_EDIT = re.compile(r"^\W*EDIT\s+\[?(b\d+)\]?\s*:\s*(.+)$", re.IGNORECASE)
_REMOVE = re.compile(r"^\W*REMOVE\s+\[?(b\d+)\]?", re.IGNORECASE)
_IDS = re.compile(r"\bb\d+\b")


class Bullet(BaseModel):
    bullet_id: str
    section: str
    text: str
    helpful: int = 0
    harmful: int = 0
    vector: list[float]


class Operation(BaseModel):
    op: Literal["add", "edit", "remove"]
    bullet_id: str | None = None
    section: str = "strategies"
    text: str = ""


def parse_delta(reply: str) -> list[Operation]:
    operations = []
    for line in reply.splitlines():
        if match := _ADD.match(line):
            operations.append(Operation(op="add", section=(match.group(1) or "strategies").lower(),
                                        text=match.group(2).strip()))
        elif match := _EDIT.match(line):
            operations.append(Operation(op="edit", bullet_id=match.group(1).lower(),
                                        text=match.group(2).strip()))
        elif match := _REMOVE.match(line):
            operations.append(Operation(op="remove", bullet_id=match.group(1).lower()))
    return operations


def tagged(reply: str, label: str) -> set[str]:
    """The bullet ids on the reply's `label:` line (HELPFUL, HARMFUL)."""
    line = next((ln for ln in reply.splitlines() if ln.strip().upper().startswith(label)), "")
    return set(_IDS.findall(line.lower()))


def insight_of(reply: str) -> str:
    line = next((ln for ln in reply.splitlines() if ln.strip().upper().startswith("INSIGHT")), None)
    if line is not None and ":" in line:
        text = line.split(":", 1)[1]
    else:
        text = (reply.strip().splitlines() or [""])[0]
    return " ".join(text.split())


def render(bullets: list[Bullet]) -> str:
    if not bullets:
        return ""
    lines = ["Playbook (bullets from your earlier tasks; helpful/harmful counts in brackets):"]
    for section in SECTIONS:
        mine = [b for b in bullets if b.section == section]
        if mine:
            lines.append(f"## {section}")
            lines += [f"- [{b.bullet_id}] (+{b.helpful}/-{b.harmful}) {b.text}" for b in mine]
    return "\n".join(lines)


def words(bullets: list[Bullet]) -> int:
    return sum(len(b.text.split()) for b in bullets)



class PlaybookAgent(BaseAgent):
    @classmethod
    def uses_embedder(cls, options: dict[str, Any]) -> bool:
        return True  # a bullet's vector finds its near-duplicates

    def __init__(self, context: AgentContext, reflect_prompt: str | None = None,
                 curate_prompt: str | None = None, merge_similarity: float = 0.9, max_words: int = 300,
                 fallback_add: bool = True, **kwargs: Any) -> None:
        reflect_prompt = reflect_prompt or REFLECT_PROMPT  # null in the yaml: the built-in prompt
        curate_prompt = curate_prompt or CURATE_PROMPT  # null in the yaml: the built-in prompt
        super().__init__(context, **kwargs)
        require_placeholders("variant.reflect_prompt", reflect_prompt, "question", "answer", "bullets")
        require_placeholders("variant.curate_prompt", curate_prompt, "insight", "bullets")
        if not 0 < merge_similarity <= 1 or max_words < 1:
            raise ValueError("variant.merge_similarity must be in (0, 1] and variant.max_words >= 1")
        self.reflect_prompt = reflect_prompt
        self.curate_prompt = curate_prompt
        self.merge_similarity = merge_similarity
        self.max_words = max_words
        self.fallback_add = fallback_add
        self.bullets: list[Bullet] = []
        self.next_id = 1
        self._directory = context.workdir / "playbook"
        self._table_name = context.run_id
        self._table: Any = None
        self._screened: dict[str, tuple[str, bool]] = {}  # bullet id -> (text checked, allowed)
        self._shown: list[Bullet] = []

    def gated_edits(self) -> tuple[GateKind, ...]:
        return ("bullet", *super().gated_edits())

    async def solve(self, episode: EnvEpisode) -> Attempt:
        self._shown = [b for b in self.bullets if await self._allowed(b)]
        return await self.act(episode, self.messages_for(episode.observation, self._system(self._shown)))

    def _system(self, bullets: list[Bullet]) -> str:
        """The system prompt with the playbook: it changes only when the playbook does, not from task
        to task, so it belongs to the prompt's stable part (agents/base.py, `messages_for`)."""
        playbook = render(bullets)
        return f"{self.system_prompt}\n\n{playbook}" if playbook else self.system_prompt

    async def learn(self, feedback: Feedback) -> None:
        await super().learn(feedback)
        final = feedback.final
        listing = render(self._shown) or "(empty)"
        reflection = (await self.llm.complete([{"role": "user", "content": self.reflect_prompt.format(
            question=feedback.task.question, answer=final.said or "(no answer)",
            outcome="correct" if final.rewarded else "incorrect", bullets=listing)}], purpose="reflect")).text
        self._count(tagged(reflection, "HELPFUL"), tagged(reflection, "HARMFUL"))
        insight = insight_of(reflection)
        if not insight:
            return
        curation = (await self.llm.complete([{"role": "user", "content": self.curate_prompt.format(
            question=feedback.task.question, bullets=render(self._visible()) or "(empty)", insight=insight)}],
            purpose="curate")).text
        delta = parse_delta(curation)
        if not delta and self.fallback_add and not curation.strip().upper().startswith("NONE"):
            delta = [Operation(op="add", text=insight)]
        await self._merge(delta, feedback.task)

    def _count(self, helpful: set[str], harmful: set[str]) -> None:
        for bullet in self.bullets:
            if bullet.bullet_id in helpful or bullet.bullet_id in harmful:
                bullet.helpful += bullet.bullet_id in helpful
                bullet.harmful += bullet.bullet_id in harmful
                self._event("used", bullet)

    async def _merge(self, delta: list[Operation], task: TaskView) -> None:
        """Apply the delta to a copy, gate the copy as a whole, then keep it or the incumbent."""
        candidate = [b.model_copy() for b in self.bullets]
        events: list[tuple[str, Bullet, float | None]] = []
        next_id = self.next_id
        for op in delta:
            existing = next((b for b in candidate if b.bullet_id == op.bullet_id), None)
            if op.op != "add" and existing is None:
                continue  # an edit or removal of a bullet that is not there
            item = existing.bullet_id if existing is not None else f"b{next_id}"
            if op.op != "remove" and (not op.text or not await self._safe(op, item)):
                continue
            if op.op == "remove" and existing is not None:
                candidate.remove(existing)
                events.append(("remove", existing, None))
            elif op.op == "edit" and existing is not None:
                existing.text, existing.vector = op.text, (await self.llm.embed([op.text]))[0]
                events.append(("edit", existing, None))
            elif op.op == "add":
                [vector] = await self.llm.embed([op.text])
                near = max(((cosine(vector, b.vector), b) for b in candidate), default=None,
                           key=lambda pair: pair[0])
                if near is not None and near[0] >= self.merge_similarity:
                    events.append(("merge", near[1], near[0]))
                    continue
                bullet = Bullet(bullet_id=f"b{next_id}", section=op.section if op.section in SECTIONS
                                else "strategies", text=op.text, vector=vector)
                next_id += 1
                candidate.append(bullet)
                events.append(("add", bullet, None))
        while words(candidate) > self.max_words and candidate:
            victim = min(candidate, key=lambda b: (b.helpful - b.harmful, int(b.bullet_id[1:])))
            candidate.remove(victim)
            events.append(("prune", victim, None))
        if not any(kind != "merge" for kind, _, _ in events):
            for kind, bullet, similarity in events:
                self._event(kind, bullet, similarity)
            return
        text = "; ".join(f"{kind} {b.bullet_id}: {b.text}" for kind, b, _ in events)
        # Bullets were checked for safety one by one (`_safe`); the gate judges the delta as a whole.
        audit = await self.guard.audit("bullet", f"delta@{self.stream_position}", text,
                                       self._renderer(self.bullets), self._renderer(candidate))
        if audit is not None and not audit.accepted:
            self.recorder.emit(PlaybookEventRow, event="rejected", bullet_id="delta", section="",
                               text=text[:2000], helpful=0, harmful=0, similarity=None)
            return
        self.bullets, self.next_id = candidate, next_id
        await self._sync()
        for kind, bullet, similarity in events:
            self._event(kind, bullet, similarity)

    async def _safe(self, op: Operation, item: str) -> bool:
        if await self.guard.check("bullet", item, op.text):
            return True
        self.recorder.emit(PlaybookEventRow, event="rejected", bullet_id=item, section=op.section,
                           text=op.text, helpful=0, harmful=0, similarity=None)
        return False

    async def _allowed(self, bullet: Bullet) -> bool:
        """The retrieval-time safety check, once per bullet text (again after an edit)."""
        if self.guard.safety is None:
            return True
        seen = self._screened.get(bullet.bullet_id)
        if seen is None or seen[0] != bullet.text:
            seen = (bullet.text, await self.guard.screen("bullet", bullet.bullet_id, bullet.text))
            self._screened[bullet.bullet_id] = seen
        return seen[1]

    def _visible(self) -> list[Bullet]:
        """The bullets not blocked by the retrieval check (as far as it has checked them)."""
        return [b for b in self.bullets if self._screened.get(b.bullet_id, (b.text, True))[1]]

    def _renderer(self, bullets: list[Bullet]) -> Render:
        """A probe's prompt with this playbook (and no lessons)."""
        shown = self.opening(self._system(bullets))

        async def opening(view: TaskView) -> Opening:
            return shown

        return opening

    async def _sync(self) -> None:
        """The run's LanceDB table of bullet vectors mirrors the playbook (kept for inspection and
        for the vector search a large playbook would need). Each change rewrites it whole, a new
        version, and the versions before it are deleted: on disk it holds the playbook once."""
        if not self.bullets:
            return
        import lancedb

        self._directory.mkdir(parents=True, exist_ok=True)
        db = await lancedb.connect_async(self._directory)
        rows = [{"bullet_id": b.bullet_id, "section": b.section, "text": b.text, "vector": b.vector}
                for b in self.bullets]
        self._table = await db.create_table(self._table_name, data=rows, mode="overwrite")
        await compact_table(self._table)

    def _event(self, kind: str, bullet: Bullet, similarity: float | None = None) -> None:
        self.recorder.emit(PlaybookEventRow, event=kind, bullet_id=bullet.bullet_id, section=bullet.section,
                           text=bullet.text, helpful=bullet.helpful, harmful=bullet.harmful,
                           similarity=similarity)

    def memory_size(self) -> int | None:
        return len(self.bullets) + (super().memory_size() or 0)

    def export_state(self) -> dict[str, Any]:
        return {**super().export_state(), "next_id": self.next_id,
                "bullets": [b.model_dump() for b in self.bullets]}

    def import_state(self, state: dict[str, Any]) -> None:
        super().import_state(state)
        self.bullets = [Bullet(**b) for b in state.get("bullets", [])]
        self.next_id = state.get("next_id", len(self.bullets) + 1)
