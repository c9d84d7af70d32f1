"""What agents see of the gateway: `await llm.complete(messages, purpose)`.

This module is light on purpose (no litellm): agent workers import it, the gateway process alone
imports litellm. An `AgentModelClient` belongs to one agent run; the runner tells it which task
and attempt the next calls belong to and collects their records after each episode.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from harness.clock import utc_now
from harness.config import BudgetSettings, CacheSettings
from harness.models.budget import RunLedger
from harness.models.chat import Completion, Message, ToolCall
from harness.tables.records import BENCHMARK_PURPOSES, CallKey, LLMCall, Purpose, TranscriptRow, Usage

BUDGET_EXHAUSTED = "BudgetExhausted"
"""Prefix of the error of a call the gateway refused because the run's budget was spent."""


class ServedAdapter(BaseModel):
    """A LoRA adapter a learner run's calls are served with (harness/training/run_trainer.py)."""

    model_config = ConfigDict(frozen=True)

    name: str
    """What the server knows it by (vLLM's `lora_name`; the request's model)."""
    hash: str
    """sha256 of its weights (llm_calls.adapter)."""
    path: str
    """Its directory: peft's files, the GGUF LoRA, or the scripted stand-in's examples."""


class CallRequest(BaseModel):
    """One model call as sent to the gateway, with everything it is attributed to."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["chat", "embed"] = "chat"
    model: str
    endpoint: str | None = None
    """The model with its settings (harness.config.endpoint_key); None: the first registered under
    `model`."""
    messages: list[Message] = []
    texts: list[str] = []
    """Inputs of an embedding call."""
    purpose: Purpose
    run_id: str
    episode_id: str | None = None
    task_id: str | None
    attempt: int
    params: dict[str, Any] = {}
    cache: CacheSettings | None = None
    """The run's own cache settings (a sweep's runs differ); None: the gateway's default."""
    cache_scope: str = ""
    """Answers are reused only within one scope: a repeat of a run (stream.repeats) never gets
    another repeat's cached answer. Never sent to the model."""
    run_in_flight: int = 0
    """Calls of the same run already in flight when this one was admitted (see LLMCall)."""
    adapter: ServedAdapter | None = None
    """Serve the call with this LoRA adapter on the base model (a learner run's); None: the base."""


class CallResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str | None = None
    tool_calls: list[ToolCall] = []
    """Function calls of the reply (a request that offered `tools`)."""
    vectors: list[list[float]] | None = None
    record: LLMCall
    fatal: bool = False
    """The error says the model cannot be used at all (a bad key, no access, no such model)."""


class ModelCallError(RuntimeError):
    """A model call failed after the gateway's retries; its record is kept all the same."""

    def __init__(self, record: LLMCall) -> None:
        super().__init__(f"{record.purpose} call to {record.model} failed: {record.error}")
        self.record = record

    def __reduce__(self) -> tuple[type[ModelCallError], tuple[LLMCall]]:
        return type(self), (self.record,)  # Ray sends it across processes


class ModelUnavailable(ModelCallError):
    """The model cannot be used at all (authentication, permission, no such model): the run stops
    at once rather than fail every remaining task; a resume carries on once it is fixed."""

    def __str__(self) -> str:
        return f"the model {self.record.model} cannot be used: {self.record.error}"


class GatewayUnavailable(RuntimeError):
    """The gateway itself could not be reached (its actor died): the agent run cannot go on, and the
    episode in progress is not recorded as finished, so a resume runs it again."""


class GatewayLink(Protocol):
    async def call(self, request: CallRequest) -> CallResult: ...


class AgentModelClient:
    """The ModelClient (harness/agent_api.py) of one agent run."""

    def __init__(self, gateway: GatewayLink, model: str, run_id: str,
                 default_params: dict[str, Any] | None = None, embedder: str | None = None,
                 model_endpoint: str | None = None, embedder_endpoint: str | None = None,
                 budget: BudgetSettings | None = None, cache: CacheSettings | None = None,
                 transcripts: bool = False, function_calling: bool = False,
                 refused_params: tuple[str, ...] = (), mark_cache: bool = False,
                 cache_scope: str = "") -> None:
        self.gateway = gateway
        self.cache_scope = cache_scope
        self.mark_cache = mark_cache
        self.refused_params = set(refused_params)
        """Never sent: the model refuses them (harness.driver.preflight.check_params)."""
        self.function_calling = function_calling
        self.ledger = RunLedger(budget)
        """The run's one tally: every call of the agent's is admitted against it before it is sent."""
        self.grading = RunLedger(None)
        """The benchmark's grading calls (`grade`): tallied apart, never against the run's budget."""
        self.cache = cache
        self.model = model
        self.model_endpoint = model_endpoint
        self.embedder = embedder
        self.embedder_endpoint = embedder_endpoint
        self.run_id = run_id
        self.default_params = dict(default_params or {})
        self.episode_id: str | None = None
        self.task_id: str | None = None
        self.attempt = 1
        self.transcripts = transcripts
        self._records: list[LLMCall] = []
        self._transcripts: list[TranscriptRow] = []
        self._in_flight: set[asyncio.Future[CallResult]] = set()
        self.adapter: ServedAdapter | None = None
        """The adapter this run's chat calls are served with (a learner's latest update); None: the base."""

    def start_episode(self, episode_id: str, task_id: str) -> None:
        self.episode_id = episode_id
        self.task_id = task_id
        self.attempt = 1

    def take_records(self) -> list[LLMCall]:
        records, self._records = self._records, []
        return records

    def take_transcripts(self) -> list[TranscriptRow]:
        """What the calls taken with `take_records` said (empty with transcripts off)."""
        transcripts, self._transcripts = self._transcripts, []
        return transcripts

    async def settle(self) -> None:
        """Wait until every call sent has come back with its record: when one of several concurrent
        calls fails, the others are still answered, billed, and must be written too."""
        while self._in_flight:
            await asyncio.wait(set(self._in_flight))

    async def complete(self, messages: list[Message], purpose: Purpose = "act",
                       **params: Any) -> Completion:
        if purpose in BENCHMARK_PURPOSES:  # an agent's call billed as grading would escape its budget
            raise ValueError(f"purpose {purpose!r} is the benchmark's, not an agent's (grade() sends it)")
        return await self._complete(messages, purpose, params)

    async def grade(self, messages: list[Message], **params: Any) -> Completion:
        """A call of the benchmark's grader (the `judge` scorer): purpose `grade`, recorded and priced
        like every call, outside the run's budget (`grading`, not `ledger`)."""
        return await self._complete(messages, "grade", params)

    async def _complete(self, messages: list[Message], purpose: Purpose,
                        params: dict[str, Any]) -> Completion:
        if self.mark_cache:
            messages = cache_marked(messages)
        request = CallRequest(model=self.model, endpoint=self.model_endpoint, messages=messages,
                              cache_scope=self.cache_scope,
                              purpose=purpose, run_id=self.run_id, episode_id=self.episode_id,
                              task_id=self.task_id, attempt=self.attempt, cache=self.cache,
                              adapter=self.adapter,
                              params={key: value for key, value in {**self.default_params, **params}.items()
                                      if key not in self.refused_params})
        result = await self._call(request)
        assert result.text is not None
        return Completion(text=result.text, usage=result.record.usage, call_id=result.record.call_id,
                          tool_calls=result.tool_calls)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        vectors = (await self.embedding(texts)).vectors
        assert vectors is not None
        return vectors

    async def embedding(self, texts: list[str]) -> CallResult:
        """`embed` with its record (the run's endpoint reports the call's usage)."""
        if self.embedder is None:
            raise RuntimeError("this run has no embedder: its agent class's uses_embedder() said it "
                               "does not embed (harness/agent_api.py); make it say so for these options")
        request = CallRequest(kind="embed", model=self.embedder, endpoint=self.embedder_endpoint, texts=texts,
                              cache_scope=self.cache_scope,
                              purpose="embed", run_id=self.run_id, episode_id=self.episode_id,
                              task_id=self.task_id, attempt=self.attempt, cache=self.cache)
        return await self._call(request)

    async def _call(self, request: CallRequest) -> CallResult:
        # A task of its own, shielded: if the caller is cancelled or a sibling call fails, the
        # request still completes and its record is kept (see `settle`).
        call = asyncio.ensure_future(self._record(request))
        self._in_flight.add(call)
        call.add_done_callback(self._in_flight.discard)
        # Its failure reaches the caller through the shield; a caller cancelled meanwhile (its job
        # stopped) no longer awaits it, and asyncio would log the failure as a traceback.
        call.add_done_callback(_retrieved)
        result = await asyncio.shield(call)
        if result.record.error is not None:
            raise (ModelUnavailable if result.fatal else ModelCallError)(result.record)
        return result

    async def _record(self, request: CallRequest) -> CallResult:
        ledger = self.grading if request.purpose in BENCHMARK_PURPOSES else self.ledger
        refusal = ledger.exhausted()
        if refusal is not None:  # refused before sending: nothing spent, but the row says so
            result = CallResult(record=_unsent(request, f"{BUDGET_EXHAUSTED}: {refusal}", ledger.in_flight))
        else:
            in_flight = ledger.admit()
            try:
                result = await self.gateway.call(request.model_copy(update={"run_in_flight": in_flight}))
            except BaseException:  # the gateway was not reached, or the call was cancelled
                ledger.settle(Usage())
                raise
            ledger.settle(result.record.usage)
        self._records.append(result.record)
        if self.transcripts:
            self._transcripts.append(self._transcript(request, result))
        return result

    def _transcript(self, request: CallRequest, result: CallResult) -> TranscriptRow:
        said = request.texts if request.kind == "embed" else request.messages
        return TranscriptRow(**result.record.model_dump(include=set(CallKey.model_fields)),
                             messages=json.dumps(said, ensure_ascii=False), reply=result.text,
                             tool_calls=json.dumps([c.model_dump() for c in result.tool_calls])
                             if result.tool_calls else None)


def _retrieved(call: asyncio.Future[CallResult]) -> None:
    if not call.cancelled():
        call.exception()


CACHE_MARKER = {"type": "ephemeral"}


def cache_marked(messages: list[Message]) -> list[Message]:
    """The messages with the system message (the stable start agents build first: system prompt and
    learnt context) marked as a cache breakpoint, in the content-block form Anthropic reads."""
    if not messages or messages[0].get("role") != "system" or not isinstance(messages[0].get("content"), str):
        return messages
    system = {**messages[0], "content": [{"type": "text", "text": messages[0]["content"],
                                          "cache_control": CACHE_MARKER}]}
    return [system, *messages[1:]]


def _unsent(request: CallRequest, error: str, in_flight: int) -> LLMCall:
    """The row of a call refused before it was sent."""
    return LLMCall(call_id=uuid.uuid4().hex, run_id=request.run_id, episode_id=request.episode_id,
                   task_id=request.task_id, attempt=request.attempt, purpose=request.purpose,
                   model=request.model, prompt_tokens=0, completion_tokens=0, total_tokens=0,
                   cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=0, usage_source="provider",
                   cost_usd=0.0, latency_s=0.0, queued_s=0.0, retries=0,
                   cached=False, error=error, run_in_flight=in_flight, started_at=utc_now())
