"""Every row the harness writes, in one module.

Each table is a pydantic model with a docstring under every field; the Arrow schema of each table
is derived from its model (`arrow_schema`), never written by hand, and `SCHEMA_VERSION` is stored in
every Parquet file's metadata. Bump it whenever a column is added, removed or changes meaning.
"""

from __future__ import annotations

import datetime as dt
import functools
import types
import typing
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from harness.tables.costs import add_costs

if TYPE_CHECKING:
    import pyarrow as pa

SCHEMA_VERSION = "10"
COMPRESSION = "zstd"
"""Parquet compression of every table (transcripts are mostly repeated prompt text)."""

AgentPurpose = Literal["act", "reflect", "distill", "optimize", "judge", "toolgen", "embed", "critique",
                       "curate", "propose", "validate", "safety"]
"""Why an agent's call was made: act, or one kind of self-improvement overhead. Counted against the
run's budget and summed into its episodes' token columns."""
BenchmarkPurpose = Literal["grade"]
"""Why the benchmark made a call in an agent run: grade (the `judge` scorer grading a reply against
its reference, envs/scorers/judge.py). Recorded and priced in llm_calls like every call, but not the
agent's spend: outside the run's budget and its episodes' token columns (`grade_tokens` apart)."""
Purpose = Literal[AgentPurpose, BenchmarkPurpose]
PURPOSES: tuple[str, ...] = typing.get_args(Purpose)
"""Every purpose, in the order the report shows them (act first: every other agent purpose is overhead;
the benchmark's last)."""
AGENT_PURPOSES: tuple[str, ...] = typing.get_args(AgentPurpose)
BENCHMARK_PURPOSES: tuple[str, ...] = typing.get_args(BenchmarkPurpose)
EditKind = Literal["lesson", "bullet", "skill", "tool"]
"""What an agent writes for itself that the safety check reads."""
GateKind = Literal["lesson", "bullet", "skill", "tool", "prompt"]
"""What the sealed gate audits: every EditKind. "prompt" is never written: no agent puts a tuned prompt
to the gate (OPRO and GEPA have no self-edit of their own; with `variant.gate=sealed` they are
refused unless a memory of lessons, `variant.memory`, gives the gate lessons to audit)."""
EditCounts = tuple[str, dict[Any, str]]
"""A column of a self-edit table, and the name of the count of each of its values."""
UsageSource = Literal["provider", "counted"]


class Usage(BaseModel):
    """Tokens, dollars and seconds of one or more model calls; `+` sums them.

    A cost of None means "unknown" (a model with no price); it stays None through sums, so a total
    is never silently understated.
    """

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    latency_s: float = 0.0
    cache_read_tokens: int | None = 0
    cache_write_tokens: int | None = 0
    reasoning_tokens: int | None = 0
    flops: float | None = 0.0
    """Estimated floating-point operations (LLMCall.flops); None once one is unknown."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=add_costs(self.cost_usd, other.cost_usd),
            latency_s=self.latency_s + other.latency_s,
            cache_read_tokens=add_counts(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=add_counts(self.cache_write_tokens, other.cache_write_tokens),
            reasoning_tokens=add_counts(self.reasoning_tokens, other.reasoning_tokens),
            flops=add_costs(self.flops, other.flops),
        )


def add_counts(a: int | None, b: int | None) -> int | None:
    """A sum of token counts that stays unknown (None) once one of them is."""
    return None if a is None or b is None else a + b


class Record(BaseModel):
    """Base of every table row: knows its table name and derives its Arrow schema."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    table: ClassVar[str]
    edit_counts: ClassVar[EditCounts | None] = None
    """For a table of self-edits: the column that says what happened, and the count the report shows
    for each of its values (report.edits_section)."""

    @classmethod
    def arrow_schema(cls) -> pa.Schema:
        import pyarrow as pa  # where a table is written or read: an agent worker makes rows only

        fields = [pa.field(name, _arrow_type(f.annotation), nullable=_is_optional(f.annotation))
                  for name, f in cls.model_fields.items()]
        return pa.schema(fields, metadata={"harness.schema_version": SCHEMA_VERSION,
                                           "harness.table": cls.table})


class CallKey(Record):
    """The columns that name a model call and what it was made for: the first of `llm_calls`,
    `interrupted_calls` and `transcripts` alike (a transcript joins its call on `call_id`)."""

    call_id: str
    """Unique id of the call (uuid4 hex)."""
    run_id: str
    """Agent run that made the call (one variant x seed x env x model stream)."""
    episode_id: str | None
    """Episode the call belongs to (see episodes.episode_id); null for calls outside any episode."""
    task_id: str | None
    """Task being worked on when the call was made; null for calls outside any task."""
    attempt: int
    """Attempt number within the episode (1-based)."""
    purpose: Purpose
    """Why the call was made: act (solving the task) or one kind of self-improvement overhead:
    reflect, distill, optimize, judge (the agent's own reference-free judge, variant.judge), toolgen,
    embed, critique (self-refine), curate (playbook, cheatsheet), propose (skills), validate (gate
    probes), safety (safety checks); or grade, the benchmark's own cost: the `judge` scorer grading a
    reply against its reference (outside the run's budget and its episodes' token columns)."""


class LLMCall(CallKey):
    """One model call through the gateway: the unit every token and dollar is counted in."""

    table: ClassVar[str] = "llm_calls"

    model: str
    """litellm model string; `scripted/...` marks the deterministic test model."""
    prompt_tokens: int
    """Input tokens, from the provider's usage report (or counted, see usage_source)."""
    completion_tokens: int
    """Output tokens, from the provider's usage report (or counted, see usage_source)."""
    total_tokens: int
    """prompt_tokens + completion_tokens."""
    cache_read_tokens: int | None
    """Of prompt_tokens, those the provider read from its prompt cache and bills at its cache-read
    price (OpenAI `prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`, as
    litellm normalises them); 0 when the provider reported none; null when it reported no usage."""
    cache_write_tokens: int | None
    """Of prompt_tokens, those the provider wrote to its prompt cache and bills at its cache-write
    price (Anthropic `cache_creation_input_tokens`); 0 when it reported none; null when unknown."""
    reasoning_tokens: int | None
    """Of completion_tokens, the hidden reasoning (thinking) tokens a reasoning model billed as
    output (`completion_tokens_details.reasoning_tokens`); 0 when it reported none; null when unknown."""
    usage_source: UsageSource
    """`provider` when the provider reported usage; `counted` when litellm's token counter filled it."""
    cost_usd: float | None
    """Dollar cost from litellm's price map or the configured per-token price; null when unknown. A
    cached answer costs what it first cost with cache.charge=true (the default), else 0."""
    latency_s: float
    """The model's seconds: from the request leaving to the reply arriving, retries and their
    back-off included (for a cached answer: the cache lookup). The harness's own seconds in between
    are in harness_s, waiting on the limits in queued_s: a zero-latency model stays near 0 on a busy
    machine."""
    harness_s: float = 0.0
    """The harness's own seconds inside the send, apart from the model's: its code preparing the
    request and reading the reply (litellm's included), and its task ready to run while the worker's
    event loop ran others or the OS ran other processes (harness/models/loop_clock.py). Wall time of
    the send = latency_s + harness_s (+ pacing, in queued_s)."""
    queued_s: float
    """Seconds spent waiting on the model's limits: its concurrency cap, its requests per minute,
    and the back-off all its callers share after a rate-limit answer."""
    retries: int
    """Retries after rate limits, timeouts or connection errors before success or giving up."""
    cached: bool
    """True when the answer came from the response cache: no request reached the provider."""
    error: str | None
    """One-line error when the call failed after all retries, or `BudgetExhausted: ...` when the run's
    budget refused it before sending; null on success."""
    run_in_flight: int
    """Calls of the same agent run already in flight when this one was admitted (what a budget can
    be overshot by); for a grade call, the run's grade calls (counted apart, against no budget)."""
    started_at: dt.datetime
    """UTC time the call was sent."""
    adapter: str | None = None
    """The sha256 of the LoRA adapter the call was served with (a learner variant's, the `training`
    table's `adapter`); null: the base model."""
    flops: float | None = None
    """Floating-point operations of the call, estimated as 2 x model.parameters x total_tokens (a
    forward pass per token); null where the model's parameter count is not known."""

    @property
    def usage(self) -> Usage:
        return Usage(prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                     cost_usd=self.cost_usd, latency_s=self.latency_s,
                     cache_read_tokens=self.cache_read_tokens, cache_write_tokens=self.cache_write_tokens,
                     reasoning_tokens=self.reasoning_tokens, flops=self.flops)


class InterruptedCall(LLMCall):
    """A model call of an episode that never finished (its process was killed, or its worker died):
    the episode is run again on resume, so the call belongs to no episode row, but it was sent and
    may have been billed. Same columns as llm_calls; the run's true spend is both tables together."""

    table: ClassVar[str] = "interrupted_calls"


class TranscriptRow(CallKey):
    """What one model call said: its input and its raw reply, before any answer extraction. Joins
    llm_calls on `call_id` (one row per call of llm_calls; off with output.transcripts=false).
    Values of secret environment variables are replaced by `[redacted]` before a row is made."""

    table: ClassVar[str] = "transcripts"

    messages: str
    """The input as JSON: the chat messages (`[{"role": ..., "content": ...}, ...]`), or for an
    embedding call the list of texts embedded."""
    reply: str | None
    """The model's reply text exactly as returned; null for embeddings and for failed or refused calls."""
    tool_calls: str | None = None
    """The reply's native function calls as JSON (`[{"id", "name", "arguments"}, ...]`); null when
    it made none."""


class Episode(Record):
    """One task attempted by one agent run: its outcome and the sum of its model calls. The token,
    dollar and FLOPs columns from n_calls to flops sum the agent's llm_calls rows (every purpose but
    grade); grade_tokens and grade_cost_usd sum the benchmark's grading rows (purpose grade), which
    count against no budget."""

    table: ClassVar[str] = "episodes"

    episode_id: str
    """Unique, deterministic id: `<run_id>/<stream_position>`, plus `/probe<i>` for replay probes."""
    run_id: str
    """Agent run (one variant x seed x env x model stream); the same config and seed give the same id."""
    variant: str
    """Agent variant name (conf/variant/<name>.yaml)."""
    seed: int
    """Seed of the agent run: it picks the tasks, their order and any sampling."""
    env: str
    """Environment name (conf/env/<name>.yaml)."""
    family: str
    """Task family inside the environment (e.g. capital, demonym)."""
    scenario: str
    """Stream scenario: sequential, interleaved or isolated (a fresh agent for every task)."""
    order_seed: int
    """Seed of the stream's order (the run's seed unless stream.order_seeds lists several)."""
    repeat: int = 0
    """Which repeat of the agent run (stream.repeats): the same tasks in the same order, its own
    sampling seed and response-cache scope; 0 for the first (and only, without repeats)."""
    stream_position: int
    """0-based position of the task in this agent run's stream (for a probe: the task it followed)."""
    probe: bool
    """True for a replay probe: an earlier task re-run to measure forgetting, not learnt from."""
    attempted: bool
    """False for a task the run never started because its budget was spent (see error)."""
    task_id: str
    """Stable id of the task within its environment."""
    question: str
    """The task as shown to the agent."""
    reference: str
    """The reference answer the scorer compares against."""
    task_metadata: str | None = None
    """The task's metadata as the environment made it, as JSON (never shown to the agent): a dataset
    row's kept columns (env.metadata), its options and, shuffled, their order (`shuffle`: the seed,
    and each shown option's index in the dataset); a SQL task's database; a game's seed. Null when
    the task has none, and in rows written before schema 7."""
    response: str | None
    """The agent's final answer (after answer extraction); null if it produced none."""
    success: bool
    """Whether the environment's checker accepted the final answer (the truth, never the judge)."""
    score: float
    """Environment score of the final attempt in [0, 1]; 1.0 for an exact match on single-answer tasks."""
    judge_score: float | None
    """The LLM judge's score of the final attempt (it never sees the reference); null without a judge."""
    reward: float
    """What the agent was told and learnt from: `score`, or `judge_score` when reward_source=judge."""
    attempts: int
    """Attempts made at the task (1 unless the variant retries; see the attempts table)."""
    model: str
    """litellm model string used to act; `scripted/...` marks the deterministic test model."""
    n_calls: int
    """Number of the agent's model calls for this episode: its llm_calls rows of every purpose but
    grade (the benchmark's grading, counted apart in grade_tokens)."""
    prompt_tokens: int
    """Sum of prompt_tokens over this episode's llm_calls rows but grade's (as every column of the
    agent's spend below, to flops)."""
    completion_tokens: int
    """Sum of completion_tokens over this episode's llm_calls rows but grade's."""
    total_tokens: int
    """Sum of total_tokens over this episode's llm_calls rows but grade's: the agent's tokens."""
    cost_usd: float | None
    """Sum of cost_usd over this episode's llm_calls rows but grade's; null if any call's cost is unknown."""
    cache_read_tokens: int | None
    """Sum of cache_read_tokens over this episode's llm_calls rows but grade's; null if any is unknown."""
    cache_write_tokens: int | None
    """Sum of cache_write_tokens over this episode's llm_calls rows but grade's; null if any is unknown."""
    reasoning_tokens: int | None
    """Sum of reasoning_tokens over this episode's llm_calls rows but grade's; null if any is unknown."""
    act_tokens: int
    """total_tokens of this episode's calls with purpose act."""
    act_cost_usd: float | None
    """cost_usd of this episode's calls with purpose act."""
    overhead_tokens: int
    """total_tokens of this episode's self-improvement calls (every purpose but act and grade)."""
    overhead_cost_usd: float | None
    """cost_usd of this episode's self-improvement calls (every purpose but act and grade)."""
    flops: float | None = None
    """Sum of flops over this episode's llm_calls rows but grade's; null if any is unknown."""
    grade_tokens: int = 0
    """total_tokens of this episode's grade calls: the benchmark's `judge` scorer grading its replies.
    Not the agent's spend: outside its budget and every token and cost column above; 0 in rows written
    before schema 10."""
    grade_cost_usd: float | None = 0.0
    """cost_usd of this episode's grade calls (outside cost_usd); null if any is unknown."""
    train_tokens: int = 0
    """Tokens a learner variant trained on after this task (the `training` rows of this episode);
    counted in the token budget beside total_tokens, which counts calls only."""
    train_cost_usd: float = 0.0
    """cost_usd of this episode's `training` rows (price.train_per_token of the model)."""
    train_flops: float | None = 0.0
    """flops of this episode's `training` rows; null if any is unknown."""
    memory_size: int | None
    """Items the agent keeps after it learnt from this task: memory items (plus playbook bullets or
    library skills for those variants); null for variants that keep none."""
    protocol: str
    """How the agent's prompt relates to the stream: online (learns only from tasks already done),
    held_out (tuned on a disjoint split) or resubstitution (tuned on the evaluated tasks)."""
    view: str | None
    """Null for a run that learns; for a frozen snapshot's evaluation (python -m harness.evaluate),
    which tasks it is evaluated on: id (held-out tasks of the same distribution), ood (another family
    or env) or replay (the source run's own earlier tasks)."""
    snapshot_of: str | None
    """The run whose learnt state this run started from (a snapshot evaluation, or
    variant.start_from); null otherwise."""
    snapshot_position: int | None
    """How many stream tasks that run had learnt from when the snapshot was taken; null otherwise."""
    latency_s: float
    """Wall seconds of the whole episode, from the first reset to the end of learning."""
    error: str | None
    """One-line error if the episode failed (e.g. the model call failed after retries); else null."""
    started_at: dt.datetime
    """UTC time the episode started."""
    finished_at: dt.datetime
    """UTC time the episode finished."""


class AttemptRow(Record):
    """One attempt at a task; an episode has one or more (Reflexion, retry)."""

    table: ClassVar[str] = "attempts"

    run_id: str
    """Agent run that made the attempt."""
    episode_id: str
    """Episode it belongs to (see episodes.episode_id)."""
    task_id: str
    """Task attempted."""
    stream_position: int
    """Position of the task in the agent run's stream."""
    attempt: int
    """Attempt number (1-based); llm_calls rows with the same run_id, task_id and attempt belong to it,
    including the judge call on it and any reflection made after it."""
    response: str | None
    """The answer given in this attempt (after answer extraction)."""
    raw_response: str | None
    """The last output the agent sent to the environment in this attempt, exactly as produced (the
    model's reply, or a learnt tool's output), before answer extraction; null when there was none."""
    success: bool
    """The environment's verdict on this attempt."""
    score: float
    """The environment's score of this attempt."""
    score_reason: str | None = None
    """Why that score, in one line, where the environment's scorer says (envs/scorers/): "matches the
    reference", "no number in the reply", ...; null for checkers that give none."""
    judge_score: float | None
    """The judge's score of this attempt; null without a judge."""
    reward: float
    """What the agent was told about this attempt (score, or judge_score with reward_source=judge)."""
    steps: int
    """Actions taken in the environment in this attempt."""
    reflection: str | None
    """Reflection carried into this attempt from the previous failed one (unverified model text)."""


class StepRow(Record):
    """One action in a multi-step environment: a command (TextWorld, ScienceWorld), a tool call or
    the final reply (env=tools): what the agent did and what it saw."""

    table: ClassVar[str] = "steps"

    run_id: str
    """Agent run."""
    episode_id: str
    """Episode it belongs to (see episodes.episode_id)."""
    task_id: str
    """Task (game) being played."""
    stream_position: int
    """Position of the task in the stream."""
    attempt: int
    """Attempt number within the episode."""
    step: int
    """1-based action number within the attempt."""
    action: str
    """The model's reply, sent to the environment as the action; for a tool call, `name(arguments)`."""
    observation: str
    """What the environment answered (first 1,000 characters)."""
    observation_chars: int
    """Full length of the observation, in characters."""
    reward: float
    """Score gained by this action."""
    done: bool
    """Whether the episode ended with this action."""
    prompt_tokens: int
    """Prompt tokens of the act call that chose this action."""
    completion_tokens: int
    """Completion tokens of that call; over an episode, steps add up to its act tokens (a reply
    with several tool calls is one call: its tokens are on the first of its steps, 0 on the rest)."""
    call_id: str | None = None
    """The act call that chose this action (see llm_calls.call_id)."""
    tool: str | None = None
    """The tool called; null for a command or a final reply."""
    arguments: str | None = None
    """The call's arguments as the model wrote them (JSON text, possibly malformed)."""
    tool_error: str | None = None
    """Why the call failed, or null: unknown_tool, invalid_json, bad_arguments (missing, extra or
    mistyped), tool_error (the tool refused, e.g. no such account)."""


class MemoryEventRow(Record):
    """One thing an agent's memory did: an item inserted, retrieved for a task, or evicted."""

    table: ClassVar[str] = "memory_events"
    edit_counts: ClassVar[EditCounts | None] = ("event", {"insert": "lessons_stored"})

    run_id: str
    """Agent run whose memory it is (each run has its own table: nothing is shared between runs)."""
    episode_id: str
    """Episode it belongs to (see episodes.episode_id)."""
    task_id: str
    """Task being worked on when it happened (retrievals: the task the item was recalled for)."""
    stream_position: int
    """Position of that task in the stream."""
    event: Literal["insert", "retrieve", "evict"]
    """insert: stored after a task; retrieve: put into the prompt for a task; evict: dropped at capacity."""
    memory_id: str
    """Id of the memory item."""
    kind: Literal["lessons", "examples"]
    """lessons: distilled one-sentence lessons; examples: the agent's own rewarded question-answer pairs."""
    text: str
    """The item's text (the lesson, or the example's answer)."""
    source_task_id: str
    """Task the item was made from (always an earlier task of the same run, for a retrieval)."""
    similarity: float | None
    """Cosine similarity of the item's question to the current task's, for retrievals; else null."""
    importance: float
    """Retrieval weight: 1.0 for items from rewarded tasks, less for failures."""
    verified: bool
    """False when the item carries reflection text (the model's own, unchecked) into the lesson."""


class PromptRow(Record):
    """One candidate system prompt an optimising variant (OPRO, GEPA) scored on its tuning tasks."""

    table: ClassVar[str] = "prompts"

    run_id: str
    """Agent run that optimised."""
    episode_id: str
    """Episode it belongs to (see episodes.episode_id)."""
    task_id: str
    """Task during which it optimised (the first of its stream: optimisation is charged there)."""
    stream_position: int
    """Position of that task."""
    step: int
    """0 for the starting prompt, then one per candidate in the order they were proposed."""
    prompt: str
    """The candidate system prompt."""
    tuning_score: float
    """Its success rate on the tuning tasks."""
    tuning_tasks: int
    """How many tuning tasks it was scored on."""
    selected: bool
    """True for the prompt the agent then used on its stream."""
    protocol: str
    """held_out (tuned on tasks disjoint from the stream) or resubstitution (tuned on the stream's own)."""
    origin: str
    """start (the configured prompt), proposal (OPRO's meta-prompt), mutation (GEPA's reflection on a
    parent's answers) or merge (GEPA's merge of two frontier candidates)."""
    parent_step: int | None = None
    """GEPA: the step of the candidate it came from (a merge: the first of the two); else None."""
    kept: bool | None = None
    """GEPA: True when it solved more of a minibatch than its parent and was scored on the Pareto tasks
    (tuning_score over them); False when it did not (tuning_score on the minibatch). None for OPRO."""
    frontier: bool | None = None
    """GEPA: True when it ended on the Pareto frontier (best on some Pareto task and not dominated).
    None for OPRO."""


class ToolEventRow(Record):
    """A model-written tool's life: registered or rejected after checks, then used (or failing) on tasks."""

    table: ClassVar[str] = "tool_events"
    edit_counts: ClassVar[EditCounts | None] = ("event", {
        "registered": "tools_registered", "rejected": "tools_rejected"})

    run_id: str
    """Agent run that owns the tool (tools are never shared between runs)."""
    episode_id: str
    """Episode it belongs to (see episodes.episode_id)."""
    task_id: str
    """Task during which it happened."""
    stream_position: int
    """Position of that task."""
    event: Literal["registered", "rejected", "used", "failed"]
    """registered: passed the checks and the sandboxed trial run; rejected: did not; used: ran in the
    sandbox on a task; failed: raised, or broke a sandbox limit, on a task."""
    tool_id: str
    """Id of the tool (one per generated function)."""
    family: str
    """Task family the tool is registered for."""
    code: str
    """The tool's source (first 4,000 characters)."""
    output: str | None
    """What the tool returned (first 500 characters), when it ran to the end."""
    error: str | None
    """Why it was rejected or failed: bad code, or the sandbox limit it broke."""
    isolation: str
    """How the tool's code was isolated when it ran: `kernel` (own user/mount/PID/network
    namespaces, a root holding only the standard library, no privileges) or `weak` (a plain
    subprocess with rlimits and an audit hook, only with `variant.sandbox.weak=true`)."""


class PlaybookEventRow(Record):
    """One change to a playbook agent's bullets (ACE-style evolving context), or their use."""

    table: ClassVar[str] = "playbook_events"
    edit_counts: ClassVar[EditCounts | None] = ("event", {
        "add": "bullets_added", "edit": "bullets_edited", "merge": "bullets_merged",
        "prune": "bullets_pruned", "rejected": "deltas_rejected"})

    run_id: str
    """Agent run whose playbook it is."""
    episode_id: str
    """Episode it belongs to (see episodes.episode_id)."""
    task_id: str
    """Task after (or for) which it happened."""
    stream_position: int
    """Position of that task."""
    event: Literal["add", "edit", "remove", "merge", "prune", "used", "rejected"]
    """add: a new bullet; edit: a bullet's text replaced; remove: dropped by the curator; merge: a
    proposed bullet near-duplicate of an existing one, which is kept instead (no second copy);
    prune: dropped as the least useful when over the word cap; used: tagged helpful or harmful by
    the reflector (counters updated); rejected: a delta the gate, or a bullet the safety check,
    refused."""
    bullet_id: str
    """Id of the bullet (`b<number>`, stable for the run)."""
    section: str
    """strategies, pitfalls or formats."""
    text: str
    """The bullet's text after the event (for remove and prune: what was dropped)."""
    helpful: int
    """Times the reflector tagged the bullet as helpful, after the event."""
    harmful: int
    """Times the reflector tagged it as harmful (misleading), after the event."""
    similarity: float | None
    """For a merge: cosine similarity of the proposed text to the bullet it was merged into."""


class SkillEventRow(Record):
    """One step of a skills agent's library: a proposal, its probe result and the decision; a
    retrieval; an eviction."""

    table: ClassVar[str] = "skill_events"
    edit_counts: ClassVar[EditCounts | None] = ("event", {
        "proposed": "skills_proposed", "admitted": "skills_admitted", "rejected": "skills_rejected",
        "evicted": "skills_evicted"})

    run_id: str
    """Agent run whose library it is."""
    episode_id: str
    """Episode it belongs to (see episodes.episode_id)."""
    task_id: str
    """Task after (or for) which it happened."""
    stream_position: int
    """Position of that task."""
    event: Literal["proposed", "admitted", "rejected", "retrieved", "evicted"]
    """proposed: a candidate written by comparing trajectories; admitted / rejected: the gate's
    decision on it; retrieved: put into the prompt for a task; evicted: dropped to keep the library
    within max_skills."""
    skill_id: str
    """Id of the skill."""
    family: str | None
    """Task family the skill was proposed from."""
    text: str
    """The skill's text."""
    probe_tasks: int | None
    """Held-out probe items the candidate was validated on (tuning split, never the stream)."""
    incumbent_correct: int | None
    """Probe items the library without the candidate got right."""
    candidate_correct: int | None
    """Probe items the library with the candidate got right."""
    regressions: int | None
    """Probe items the incumbent got right and the candidate wrong (at most regression_budget)."""
    reason: str | None
    """Why it was rejected (or what the gate saw)."""
    similarity: float | None
    """For a retrieval: cosine similarity of the skill to the task."""


class GateEventRow(Record):
    """A self-edit put to the sealed gate (`variant.gate=sealed`): the audit on held-out probe items
    the agent never sees, and the decision; the agent is told only accepted or rejected."""

    table: ClassVar[str] = "gate_events"
    edit_counts: ClassVar[EditCounts | None] = ("accepted", {True: "gate_accepted", False: "gate_rejected"})

    run_id: str
    """Agent run that proposed the edit."""
    episode_id: str
    """Episode it belongs to (see episodes.episode_id)."""
    task_id: str
    """Task after which the edit was proposed."""
    stream_position: int
    """Position of that task."""
    kind: GateKind
    """What the edit changes: a memory lesson, playbook bullets or a cheatsheet (bullet), a skill, a learnt
    tool. No row says prompt: a tuned prompt is never put to the gate."""
    edit_id: str
    """Id of the edit (the memory item, delta, skill or tool)."""
    text: str
    """The edit as proposed (first 2,000 characters)."""
    probe_tasks: int
    """Probe items audited (from the tuning split)."""
    incumbent_correct: int
    """Probe items the incumbent state got right."""
    candidate_correct: int
    """Probe items the state with the edit got right."""
    regressions: int
    """Probe items the incumbent got right and the candidate wrong."""
    accepted: bool
    """The decision: net improvement (or no change, with `accept_ties`) within the regression budget."""


class SafetyEventRow(Record):
    """A safety check of something an agent wrote (a lesson, bullet, skill or tool), when it was
    written or when it was retrieved for a task (`variant.safety`)."""

    table: ClassVar[str] = "safety_events"
    edit_counts: ClassVar[EditCounts | None] = ("decision", {
        "allowed": "safety_allowed", "blocked": "safety_blocked", "flagged": "safety_flagged"})

    run_id: str
    """Agent run whose item it is."""
    episode_id: str
    """Episode it belongs to (see episodes.episode_id)."""
    task_id: str
    """Task during (or after) which the check ran."""
    stream_position: int
    """Position of that task."""
    stage: Literal["write", "retrieve"]
    """write: before the item is stored; retrieve: before it goes into a prompt."""
    kind: EditKind
    """What was checked."""
    item_id: str
    """Id of the item checked."""
    text: str
    """The item's text (first 1,000 characters)."""
    verdict: Literal["safe", "unsafe", "unclear"]
    """The checker's reading of its reply (unclear: it said neither; counted as unsafe by block)."""
    decision: Literal["allowed", "blocked", "flagged"]
    """allowed: safe; blocked: not stored / not put into the prompt (policy block); flagged: kept,
    and marked here (policy flag)."""
    policy: Literal["block", "flag"]
    """The configured policy."""
    reason: str | None
    """The checker's reply, first 300 characters."""


class SnapshotRow(Record):
    """An immutable copy of everything an agent run had learnt at one point of its stream: its
    memory items (with their vectors), its system prompt and its tools, in `path`."""

    table: ClassVar[str] = "snapshots"

    run_id: str
    """Agent run whose state it is."""
    episode_id: str
    """The episode after whose learning it was taken."""
    position: int
    """Stream tasks learnt from when it was taken (the episode's stream_position + 1)."""
    final: bool
    """True for the snapshot taken at the end of the stream."""
    path: str
    """Its directory, relative to the run directory: `snapshot_data/<run_id>/<position>` holding
    state.json (prompt, protocol, and the variant's bullets, skills, cheatsheet or tools), memory.parquet
    (the memory table's rows) and, for an outside agent, files/ (what it saved)."""
    memory_items: int | None
    """Items in the memory at that point; null for variants without memory."""
    memory_version: int | None
    """Version of the run's LanceDB memory table at that point: it grows with every write to the
    table, so a later snapshot has a larger one; null without memory. The memory deletes its older
    versions as it compacts its table, so that point's rows are in memory.parquet, not behind
    `table.checkout(version)`."""
    system_prompt: str
    """The system prompt the agent acted with (OPRO's tuned one, for example)."""
    tools: int
    """Learnt tools kept (tool_learning); 0 for other variants."""
    created_at: dt.datetime
    """UTC time it was written."""


class TrainingRow(Record):
    """One weight update of a learner variant (variant=sft, dpo): what it trained on, what it cost,
    and the adapter it made (harness/training/)."""

    table: ClassVar[str] = "training"

    run_id: str
    """Agent run id (join to episodes and llm_calls)."""
    episode_id: str
    """The episode after whose task the update ran (its learning step)."""
    task_id: str
    """That episode's task."""
    stream_position: int
    """That episode's position in the stream."""
    update: int
    """1 for the run's first update, then 2, 3, ... (a run started from a snapshot counts its own)."""
    kind: Literal["sft", "dpo"]
    """sft: supervised fine-tuning on chat examples; dpo: preference pairs (chosen over rejected)."""
    trainer: str
    """What trained: `transformers` (peft LoRA on the base model's weights) or `scripted` (the
    scripted model's stand-in, which remembers its examples and trains nothing)."""
    examples: int
    """Examples (sft) or pairs (dpo) the update trained on."""
    examples_own: int
    """Of them, the agent's own replies that succeeded (rejection sampling, as STaR / ReST-EM)."""
    examples_revealed: int
    """Of them, built on a reference answer revealed after the task (stream.feedback=answer)."""
    steps: int
    """Optimiser steps."""
    tokens_trained: int
    """Tokens passed through forward and backward passes, summed over steps (prompt and reply;
    dpo: chosen and rejected)."""
    loss_before: float | None
    """The training loss at the first step (sft: cross-entropy on the replies; dpo: the DPO loss);
    null for the scripted trainer."""
    loss_after: float | None
    """The loss after the last step; null for the scripted trainer."""
    wall_s: float
    """Seconds the update took (training, the adapter's export)."""
    cpu_s: float
    """CPU seconds of the update, all the trainer's threads."""
    flops: float | None
    """6 x trainable-path parameters x tokens_trained + 2 x parameters x forward-only tokens
    (docs/weights.md, "How an update is priced"); null for the scripted trainer without
    model.parameters."""
    cost_usd: float
    """tokens_trained x price.train_per_token of the model."""
    adapter: str
    """sha256 of the adapter's weights after the update; calls served with it carry it in
    llm_calls.adapter."""
    previous_adapter: str | None
    """The adapter the update started from; null: the base model."""
    reused: bool
    """The adapter was found on disk from an identical update (a resumed run replaying its stream):
    not trained again, its figures those of the update that made it."""
    started_at: dt.datetime
    """UTC time the update started."""


class RunRow(Record):
    """One agent run and every setting that shapes its behaviour: join any table on `run_id` to
    compare runs by what they were configured with (e.g. a swept `variant.max_attempts`)."""

    table: ClassVar[str] = "runs"

    run_id: str
    """Agent run id: variant, env, seed, order seed and a hash of `settings` (different settings never
    share an id; the same settings always do, which resuming relies on)."""
    variant: str
    """Variant name (conf/variant/)."""
    env: str
    """Environment name (conf/env/)."""
    seed: int
    """Seed: picks the run's tasks (and their order unless order seeds are given)."""
    order_seed: int
    """Seed of the task order."""
    repeat: int = 0
    """Which repeat of the agent run (stream.repeats); 0 for the first."""
    scenario: str
    """Stream scenario: sequential, interleaved or isolated."""
    feedback: str = "outcome"
    """stream.feedback: outcome (each attempt's success) or answer (also the reference answer,
    revealed after the task's final attempt)."""
    model: str
    """litellm model string of the acting model."""
    job: int | None
    """Hydra job number within its sweep; null for a single run."""
    overrides: str
    """The command-line overrides of the job that ran it, as Hydra received them (space-separated)."""
    model_params: str
    """The completion parameters sent with every call of the acting model, as a JSON object, after
    the model check dropped any the model refuses (a reasoning model's temperature): two runs that
    sent different parameters are never compared blind."""
    settings: str
    """Every behaviour-relevant setting as a JSON object of dotted keys (`variant.max_attempts`,
    `model.params.temperature`, `model.scripted.accuracy`, `budget.max_tokens`, ...): what the run id
    hashes, and what the summary and the report group runs by when it varies."""
    started_at: dt.datetime
    """UTC time the run's job started."""


TABLES: dict[str, type[Record]] = {model.table: model for model in (
    Episode, AttemptRow, StepRow, LLMCall, InterruptedCall, TranscriptRow, MemoryEventRow, PromptRow,
    PlaybookEventRow, SkillEventRow, ToolEventRow, GateEventRow, SafetyEventRow, SnapshotRow, TrainingRow,
    RunRow)}


class AgentRunInfo(BaseModel):
    run_id: str
    variant: str
    seed: int
    env: str
    num_tasks: int
    episodes: int | None = None
    """Episodes this run finished; None while running."""
    stopped_by: str | None = None
    """Why the run stopped before its last task (e.g. its budget); None if it did not."""


class Manifest(BaseModel):
    """`manifest.json` in every run directory: what ran, with what, when, and how it ended."""

    schema_version: str = SCHEMA_VERSION
    status: Literal["running", "finished", "failed", "interrupted"]
    error: str | None = None
    resumes: int = 0
    """How many times this run directory was resumed after an interruption."""
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    model: str
    model_is_scripted: bool
    git_sha: str | None
    python: str
    platform: str
    packages: dict[str, str | None]
    model_params: dict[str, Any] | None = None
    """The acting model's completion parameters as sent (see runs.model_params)."""
    ray_address: str | None = None
    dashboard_url: str | None = None
    agent_runs: list[AgentRunInfo]
    tables: dict[str, int] = {}
    """Rows per table in the run directory when the manifest was last written: once the job has
    ended, all of them (a resumed job's earlier rows included)."""
    env_setup_s: dict[str, list[float]] = {}
    """Seconds each worker spent building each environment (games, generators), apart from episodes."""
    startup_s: dict[str, float] = {}
    """Seconds from the command's start to each stage of its start-up (harness/driver/startup.py):
    composed, ray, pool, checked. Its first model call is the earliest llm_calls.started_at."""
    config: dict[str, Any]
    """The resolved Hydra config of the job."""


@functools.cache
def _scalars() -> dict[Any, pa.DataType]:
    """Python's scalar types as Arrow's (pyarrow imported on first use)."""
    import pyarrow as pa

    return {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_(),
            dt.datetime: pa.timestamp("us", tz="UTC")}


def _non_none(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _is_optional(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def _arrow_type(annotation: Any) -> pa.DataType:
    base = _non_none(annotation)
    if typing.get_origin(base) is Literal:
        base = str
    if base in _scalars():
        return _scalars()[base]
    raise TypeError(f"no Arrow type for annotation {annotation!r}")


def columns_markdown() -> str:
    """The column reference (docs/columns.md), generated from the field docstrings above."""
    lines: list[str] = []
    for name, model in TABLES.items():
        lines += ["", f"#### `{name}`", "", " ".join((model.__doc__ or "").split()), "",
                  "| column | type | meaning |",
                  "|---|---|---|"]
        schema = model.arrow_schema()
        for field, info in model.model_fields.items():
            meaning = " ".join((info.description or "").split())
            lines.append(f"| `{field}` | {schema.field(field).type} | {meaning} |")
    return "\n".join(lines[1:])
