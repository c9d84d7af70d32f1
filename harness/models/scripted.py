"""The scripted model: a deterministic litellm provider for tests, dry runs and benchmarks.

It is registered with litellm like any real provider (`scripted/<anything>`) and goes through the
same gateway, so everything it produces is accounted exactly like a real model, and its model
name marks every row as scripted. Its policy:
- a question it knows (from the answer key of the stream) is answered right when the answer appears
  anywhere else in the conversation (it "learns" from examples and lessons in its prompt), else
  right with probability `accuracy`, decided by a hash of the question (the same question always
  gets the same verdict, like greedy decoding of a real model; with temperature > 0 the hash also
  takes the request's `seed`, so resampling can change the verdict);
- a tool-use task (its reference answer is a solution of calls, as env=tools writes it) is solved
  by replaying the calls one per reply, then the reply, when the verdict is right (it answers
  WRONG_ANSWER at once otherwise); the calls are native `tool_calls` when the request offers
  `tools`, else JSON in the text (harness/models/chat.py), so both protocols are testable offline;
- a call that matches one of its `rules` (by purpose, which the gateway passes to in-process
  providers, and by a text the prompt contains) gets that rule's fixed reply, before anything else;
- a call served with a scripted LoRA adapter (a learner's: harness/training/run_trainer.py) whose
  examples hold the call's last user turn gets the reply it was trained on, as a fine-tuned model
  would give its training reply, before the default policy;
- a yes/no grading request (it asks for "YES or NO") is answered YES: a maximally lenient
  self-judge, the case in which self-graded rewards inflate;
- anything else gets a deterministic filler reply;
- a `fail_rate` share of requests (by hash) raise RateLimitError on their first `fail_attempts` tries;
- token counts come from litellm's tokenizer on the real text; `latency_s` is slept on every call.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import string
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

import litellm
from litellm import CustomLLM
from litellm.types.utils import ChatCompletionMessageToolCall, Function, ModelResponse

from harness.models.chat import ToolCall, text_call
from harness.models.providers import InProcessProvider

WRONG_ANSWER = "I am not sure."
SCRIPTED_ADAPTER = "scripted_adapter.json"
"""The scripted stand-in of a LoRA adapter, in the adapter's directory: {"replies": {turn: reply}}."""


def last_user_turn(messages: list[dict[str, Any]]) -> str:
    """What a scripted adapter keys a reply by."""
    return next((str(m.get("content") or "") for m in reversed(messages) if m["role"] == "user"), "")


TOKENIZER = "gpt-3.5-turbo"
"""The tokenizer (litellm's, by a model it knows) the scripted model counts every token with."""


def conversation_tokens(messages: list[dict[str, Any]]) -> int:
    """Tokens of a conversation as the scripted model counts its prompts: what its stand-in trainer
    counts as trained."""
    return int(litellm.token_counter(model=TOKENIZER, messages=messages))


@functools.cache
def adapter_replies(directory: str) -> dict[str, str]:
    """The replies a scripted adapter was trained on (an adapter's directory never changes: its name
    is the hash of what made it)."""
    return dict(json.loads((Path(directory) / SCRIPTED_ADAPTER).read_text())["replies"])


_PUNCTUATION = str.maketrans(dict.fromkeys(string.punctuation + "\u2019\u2018\u201c\u201d", " "))


def fold(text: str) -> str:
    """Case, accents, punctuation and spacing folded, as the environments fold a reply and its
    reference (envs/base.py's `normalize`, which tests/models/test_scripted.py holds it to): the
    model sees an answer in its prompt as the scorer would. Its own, since the models import no
    environment."""
    decomposed = unicodedata.normalize("NFKD", text)
    without_accents = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(without_accents.casefold().translate(_PUNCTUATION).split())


def _unit_hash(*parts: str) -> float:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class ScriptedLLM(CustomLLM):
    def __init__(self, accuracy: float, latency_s: float = 0.0, fail_rate: float = 0.0,
                 fail_attempts: int = 1_000_000, answer_key: dict[str, str] | None = None,
                 rules: list[Any] | None = None, prompt_cache_min_tokens: int | None = None) -> None:
        super().__init__()
        self.prompt_cache_min_tokens = prompt_cache_min_tokens
        self.rules = list(rules or [])
        self.accuracy = accuracy
        self.latency_s = latency_s
        self.fail_rate = fail_rate
        self.fail_attempts = fail_attempts
        self.answer_key = dict(answer_key or {})
        self._tries: Counter[str] = Counter()

    def reply(self, messages: list[dict[str, Any]], params: dict[str, Any] | None = None,
              purpose: str | None = None) -> str:
        text, calls = self.respond(messages, params, purpose)
        return text if not calls else ""

    def respond(self, messages: list[dict[str, Any]], params: dict[str, Any] | None = None,
                purpose: str | None = None, adapter: str | None = None) -> tuple[str, list[ToolCall]]:
        """The reply's text and its native tool calls (`adapter`: the directory of the scripted
        adapter the call is served with)."""
        params = params or {}
        prompt = "\n".join(str(m.get("content") or "") for m in messages)
        for rule in self.rules:
            if rule.purpose in (None, purpose) and (rule.contains is None or rule.contains in prompt):
                return rule.reply, []
        if adapter is not None and (trained := adapter_replies(adapter).get(last_user_turn(messages))):
            return trained, []
        user_turns = [str(m.get("content") or "") for m in messages if m["role"] == "user"]
        last_user = user_turns[-1] if user_turns else ""
        if "YES or NO" in last_user:
            return "YES", []
        position, question = next(((i, q) for i, m in reversed(list(enumerate(messages)))
                                   if m["role"] == "user"
                                   and (q := self._known_question(str(m.get("content") or ""))) is not None),
                                  (0, None))
        if question is None:
            return f"Scripted reply {_unit_hash(last_user):.6f}.", []
        answer = self.answer_key[question]
        # Everything in the prompt but the question itself (which may name the answer, as
        # "Djibouti" does for its capital) counts as an example the model can learn from.
        context = fold(" ".join(str(m.get("content") or "") for m in messages).replace(question, " "))
        seen_in_prompt = f" {fold(answer)} " in f" {context} "
        # Greedy calls always get the same verdict; sampled calls (temperature > 0) draw a fresh one
        # per provider `seed`, so resampling can change the answer, reproducibly.
        draw = str(params.get("seed")) if float(params.get("temperature") or 0) > 0 else ""
        right = seen_in_prompt or _unit_hash("accuracy", question, draw) < self.accuracy
        solution = _tool_solution(answer)
        if solution is None:
            return (answer if right else WRONG_ANSWER), []
        if not right:
            return WRONG_ANSWER, []
        done = sum(m["role"] == "assistant" for m in messages[position + 1:])
        if done >= len(solution["calls"]):
            return solution["reply"], []
        step = solution["calls"][done]
        call = ToolCall.new(step["tool"], json.dumps(step["arguments"]), key=f"{question}\x1f{done}")
        return ("", [call]) if params.get("tools") else (text_call(call), [])

    def _known_question(self, text: str) -> str | None:
        if text in self.answer_key:
            return text
        return next((q for q in self.answer_key if q in text), None)

    def _maybe_fail(self, messages: list[dict[str, Any]], model: str) -> None:
        if self.fail_rate <= 0:
            return
        key = repr(messages)
        if _unit_hash("fail", key) >= self.fail_rate:
            return
        self._tries[key] += 1
        if self._tries[key] <= self.fail_attempts:
            raise litellm.RateLimitError(message="scripted rate limit", llm_provider="scripted", model=model)

    async def acompletion(self, model: str, messages: list, api_base: str, custom_prompt_dict: dict,
                          model_response: ModelResponse, print_verbose: Any, encoding: Any,
                          api_key: Any, logging_obj: Any, optional_params: dict, *args: Any,
                          **kwargs: Any) -> ModelResponse:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        self._maybe_fail(messages, model)
        metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
        text, calls = self.respond(messages, optional_params, metadata.get("purpose"),
                                   metadata.get("adapter"))
        prompt_tokens = litellm.token_counter(model=TOKENIZER, messages=messages,
                                              tools=optional_params.get("tools"))
        said = text + "".join(c.name + c.arguments for c in calls)
        completion_tokens = litellm.token_counter(model=TOKENIZER, text=said,
                                                  count_response_tokens=True)
        message = model_response.choices[0].message  # type: ignore[union-attr]
        message.content = text if not calls else None
        if calls:
            message.tool_calls = [ChatCompletionMessageToolCall(
                id=c.id, type="function", function=Function(name=c.name, arguments=c.arguments))
                for c in calls]
            model_response.choices[0].finish_reason = "tool_calls"
        model_response.model = model
        details = {"cached_tokens": self._cached_tokens(messages)} if self.prompt_cache_min_tokens else None
        model_response.usage = litellm.Usage(prompt_tokens=prompt_tokens,  # type: ignore[attr-defined]
                                             completion_tokens=completion_tokens,
                                             total_tokens=prompt_tokens + completion_tokens,
                                             prompt_tokens_details=details)
        return model_response

    def _cached_tokens(self, messages: list[dict[str, Any]]) -> int:
        """A warm prefix cache, emulated without state (so a resumed run reports what an uninterrupted
        one does): the system message, the stable start agents send first, is read from cache when
        it has at least `prompt_cache_min_tokens` tokens."""
        if not messages or messages[0].get("role") != "system" or self.prompt_cache_min_tokens is None:
            return 0
        system = conversation_tokens(messages[:1])
        return system if system >= self.prompt_cache_min_tokens else 0

    def completion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        raise NotImplementedError("the scripted model is async only: the gateway uses acompletion")


def _tool_solution(answer: str) -> dict[str, Any] | None:
    """The reference solution of a tool-use task (`{"calls": [...], "reply": ...}`), else None."""
    if not answer.startswith('{"calls"'):
        return None
    solution = json.loads(answer)
    return solution if isinstance(solution, dict) and "calls" in solution else None


class ScriptedRouter(InProcessProvider):
    """The `scripted` provider: one ScriptedLLM per scripted endpoint (a model name with its
    settings, so two settings of one name never mix), answer keys merged."""

    def __init__(self) -> None:
        super().__init__()
        self.models: dict[str, ScriptedLLM] = {}

    def route(self, endpoint_key: str, name: str) -> str:
        return "scripted/" + "".join(c if c.isalnum() else "-" for c in endpoint_key)

    def serve(self, route: str, name: str, settings: Any, answer_key: dict[str, str]) -> None:
        self.add(route, settings.scripted, answer_key)
        self.add(name, settings.scripted, answer_key)  # the plain name: its first settings

    def add(self, name: str, options: Any, answer_key: dict[str, str]) -> None:
        short = name.split("/", 1)[1]
        if short not in self.models:
            self.models[short] = ScriptedLLM(accuracy=options.accuracy, latency_s=options.latency_s,
                                             fail_rate=options.fail_rate, fail_attempts=options.fail_attempts,
                                             rules=options.rules,
                                             prompt_cache_min_tokens=options.prompt_cache_min_tokens)
        self.models[short].answer_key.update(answer_key)

    async def acompletion(self, model: str, *args: Any, **kwargs: Any) -> ModelResponse:
        if model not in self.models:
            raise ValueError(f"no scripted model {model!r} is registered")
        return await self.models[model].acompletion(model, *args, **kwargs)

    def completion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        raise NotImplementedError("the scripted model is async only: the gateway uses acompletion")

