"""An agent worker sends its lean-path calls without importing litellm (seconds of CPU at every cold
start), and they are the calls litellm would send, with the rows litellm would give.

What it needs of litellm is worked out where litellm is loaded and carried to it: which parameters
litellm sends as given for the model (`ParamMap`, harness/models/param_map.py); the rest it knows
without litellm: whether the OpenAI key is set, whether litellm's price map may price a reply, which
errors are retried or fatal (by litellm's names).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import litellm
import pytest
from litellm.utils import get_optional_params

from harness.bench.fake_chat import FakeChatServer
from harness.config import ModelSettings
from harness.models.capabilities import keys_in_environment
from harness.models.direct import may_have_a_price
from harness.models.gateway import FATAL_ERRORS, RETRYABLE, Gateway
from harness.models.model_client import CallRequest
from harness.models.param_map import PROBES, ParamMap, as_sent, param_map

TOOLS = PROBES["tools"]
SENT = [{"temperature": 0.0}, {"temperature": 0.7, "seed": 0}, {"temperature": None}, {"max_tokens": 48},
        {"max_tokens": 0, "seed": 12345}, {"stop": []}, {"stop": "x"}, {"stop": ["a", "b"], "top_p": 1.0},
        {"tools": []}, {"tools": TOOLS, "tool_choice": "auto"}, {"tool_choice": "none"},
        {"response_format": {"type": "text"}}, {"n": 1, "presence_penalty": 0.0, "frequency_penalty": 0.5},
        {"logprobs": False}, {"logprobs": True, "top_logprobs": 2}, {"user": "u"},
        {"parallel_tool_calls": False},
        {"logit_bias": {}}, {"max_completion_tokens": 10}, {"max_tokens": 8, "max_completion_tokens": 10},
        {"reasoning_effort": "low"}, {"store": True}, {"service_tier": "auto"},
        {"temperature": 0.2, "max_tokens": 64, "seed": 7, "stop": ["\n"], "tools": TOOLS}]
MODELS = ["openai/fake", "openai/smollm2", "openai/gpt-4o-mini", "openai/gpt-5-mini", "openai/o3-mini"]


def litellms_body(route: str, params: dict[str, Any]) -> dict[str, Any] | None:
    try:
        mapped = get_optional_params(model=route.split("/", 1)[1], custom_llm_provider="openai", **params)
        return as_sent(mapped)
    except litellm.UnsupportedParamsError:
        return None


@pytest.mark.parametrize("route", MODELS)
def test_what_a_param_map_sends_is_what_litellm_sends(route):
    known = param_map(route)
    assert known is not None and known.model == route.split("/", 1)[1]
    answered = 0
    for params in SENT:
        body = known.body(params)
        if body is not None:  # else the worker asks litellm
            answered += 1
            assert body == litellms_body(route, params), params
    assert answered >= 10


def test_probing_logs_nothing_to_the_users_output(caplog):
    """The driver's logging (Hydra's) prints INFO: each of litellm's mappings logs "LiteLLM completion()
    model=..." there, dozens of lines before a run's first."""
    caplog.set_level(logging.INFO)
    level = logging.getLogger("LiteLLM").level
    assert param_map("openai/fake") is not None
    assert [r.getMessage() for r in caplog.records if r.name == "LiteLLM"] == []
    assert logging.getLogger("LiteLLM").level == level  # set back as it was


def test_a_reasoning_models_renamed_and_refused_parameters_are_left_to_litellm():
    known = param_map("openai/gpt-5-mini")
    assert known is not None
    assert known.body({"max_tokens": 64}) is None  # litellm sends it as max_completion_tokens
    assert known.body({"temperature": 0.7}) is None  # litellm refuses it
    assert known.body({"seed": 1, "max_completion_tokens": 64}) == {"seed": 1, "max_completion_tokens": 64}


@pytest.mark.parametrize("key_set", [True, False])
def test_whether_the_openai_key_is_set_is_litellms_answer(monkeypatch, key_set):
    if key_set:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    else:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for route in ("openai/fake", "openai/gpt-4o-mini"):
        ours = keys_in_environment(route, "http://127.0.0.1:9/v1")
        theirs = litellm.validate_environment(model=route, api_base="http://127.0.0.1:9/v1")
        assert ours == bool(theirs["keys_in_environment"]) == key_set


def test_a_reply_litellms_price_map_prices_is_never_taken_for_unpriced():
    shipped = Path(litellm.__file__).parent / "model_prices_and_context_window_backup.json"
    assert all(may_have_a_price(name) for name in json.loads(shipped.read_text()))
    assert may_have_a_price("gpt-4o-mini-2024-07-18") and may_have_a_price("ft:gpt-4o-mini:acme::abc123")
    assert not may_have_a_price("fake") and not may_have_a_price("smollm2")
    assert may_have_a_price("smollm2", registered={"openai/smollm2"})  # a price the config gave


def test_retried_and_fatal_errors_are_named_as_litellm_names_them():
    for name in RETRYABLE:
        assert issubclass(getattr(litellm, name), Exception)
    fatal = (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError)
    assert tuple(f"{kind.__name__}:" for kind in fatal) == FATAL_ERRORS


CHILD = """
import asyncio, json, sys
from harness.bench.fake_chat import FakeChatServer
from harness.config import ModelSettings
from harness.models.gateway import Gateway
from harness.models.model_client import CallRequest
from harness.models.param_map import ParamMap

settings, request, known = (json.loads(arg) for arg in sys.argv[1:4])
server = FakeChatServer(latency_s=0.0)
server.start()
settings["api_base"] = server.api_base
gateway = Gateway([ModelSettings(**settings)])
gateway.register([], param_maps={known["model"]: ParamMap(known["model"], frozenset(known["unchanged"]))})
result = asyncio.run(gateway.call(CallRequest(**request)))
print(json.dumps({"record": result.record.model_dump(mode="json"), "text": result.text,
                  "litellm": "litellm" in sys.modules, "body": server.requests[0]["body"]}))
"""
CLOCKS = {"call_id", "started_at", "latency_s", "harness_s", "queued_s"}


def test_a_lean_call_in_a_process_without_litellm_gives_the_row_litellm_gives():
    settings = {"name": "openai/fake", "api_base": None, "max_concurrency": 4, "requests_per_minute": None,
                "max_retries": 1, "retry_backoff_s": 0.0, "timeout_s": 30, "price": None, "params": {},
                "function_calling": None}
    request = {"model": "openai/fake", "messages": [{"role": "user", "content": "Capital of France?"}],
               "purpose": "act", "run_id": "run", "episode_id": "e", "task_id": "t", "attempt": 1,
               "params": {"temperature": 0.0, "max_tokens": 16, "seed": 3}}
    known = param_map("openai/fake")
    assert isinstance(known, ParamMap)
    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps(settings), json.dumps(request),
                            json.dumps({"model": known.model, "unchanged": sorted(known.unchanged)})],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    lean = json.loads(child.stdout)
    assert lean["litellm"] is False  # nothing in the worker's process imported it

    with FakeChatServer(latency_s=0.0) as server:  # the same call, all through litellm
        through = Gateway([ModelSettings(**{**settings, "api_base": server.api_base})], direct=False)
        result = asyncio.run(through.call(CallRequest(**request)))
        body = server.requests[0]["body"]
    expected = {k: v for k, v in result.record.model_dump(mode="json").items() if k not in CLOCKS}
    assert {k: v for k, v in lean["record"].items() if k not in CLOCKS} == expected
    assert lean["text"] == result.text and lean["body"] == body
    assert lean["record"]["error"] is None and lean["record"]["cost_usd"] is None


def test_the_model_check_ships_a_lean_models_param_map_and_function_calling():
    from harness.driver.preflight import check_models, needs_litellm
    from tests.conftest import scripted_settings

    lean = scripted_settings("model=litellm", "model.name=openai/my-served-model",
                             "model.api_base=http://127.0.0.1:9/v1")
    assert needs_litellm(lean)
    checked = check_models(lean)
    assert checked.param_map == param_map("openai/my-served-model")
    assert checked.function_calling is False  # litellm's map does not know the model: tools go as text

    scripted = scripted_settings()
    assert not needs_litellm(scripted)  # the check imports nothing: a scripted run's driver never does
    checked = check_models(scripted)
    assert checked.param_map is None and checked.function_calling is True


def test_a_failed_model_check_raises_where_its_result_is_asked_for(monkeypatch):
    from harness.config import ConfigError
    from harness.driver.preflight import start_model_checks
    from tests.conftest import scripted_settings

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    checks = start_model_checks(scripted_settings("model=litellm", "model.name=openai/gpt-4o-mini"))
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        checks.result(timeout=60)


def test_a_config_the_checks_refuse_is_what_a_job_says_even_where_ray_fails_to_start(monkeypatch, tmp_path):
    from harness.config import ConfigError
    from harness.driver import run as run_module
    from harness.errors import RunAborted
    from tests.conftest import scripted_settings

    def ray_that_fails(*args: Any, **kwargs: Any) -> None:  # as an overloaded machine's raylet can
        raise RunAborted("could not start a local Ray (the current node timed out during startup)")

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(run_module, "start_job_session", ray_that_fails)
    settings = scripted_settings("model=litellm", "model.name=openai/gpt-4o-mini")
    with pytest.raises(ConfigError, match="needs OPENAI_API_KEY"):
        run_module.run(settings, tmp_path / "run")
