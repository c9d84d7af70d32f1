"""Reasoning models, prompt caches and their dollars, against the providers' wire formats.

The model is `WireServer` (harness/models/wire_server.py), reached by litellm through `model.api_base`:
it reports cache reads, cache writes and reasoning tokens in each provider's own usage format, and
refuses what the real APIs refuse. Each agent run here is run in-process (no Ray) after the same
model check a job runs on its pool worker (harness.driver.preflight.check_models).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import litellm
import polars as pl
import pytest

from harness.agent_run.components import build_environment
from harness.agent_run.plan import build_plan
from harness.agent_run.runner import run_agent
from harness.config import ConfigError, HarnessConfig
from harness.driver.preflight import check_models
from harness.models.gateway import Gateway
from harness.models.wire_server import WireServer
from tests.conftest import ListSink, compose_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def server() -> WireServer:
    with WireServer(cache_block=4, cache_min_tokens=8) as wire:
        yield wire


def settings_for(model: str, api_base: str, *overrides: str) -> HarnessConfig:
    cfg = compose_config("model=litellm", f"model.name={model}", f"model.api_base={api_base}",
                         "embedder=hashing", "stream.num_tasks=3", "stream.tuning_size=0", "progress=false",
                         "cache.enabled=false", *overrides)
    return HarnessConfig.from_dictconfig(cfg)


def run_checked(settings: HarnessConfig, workdir: Path) -> tuple[list[dict], list[dict]]:
    """One agent run as a job runs it: the model check's parameters into the plan, then the run;
    its llm_calls and episodes rows."""
    checked = check_models(settings)
    spec = build_plan(settings, workdir)[0]
    sink = ListSink()
    gateway = Gateway([settings.model, settings.embedder], cache=settings.cache)
    asyncio.run(run_agent(spec, checked, build_environment(spec.env_cfg), gateway, sink))
    return sink.rows["llm_calls"], sink.rows["episodes"]


def chat_bodies(server: WireServer) -> list[dict]:
    return [r["body"] for r in server.requests if r["path"].endswith(("/chat/completions", "/messages"))]


def test_a_reasoning_model_runs_with_the_defaults_it_refuses_left_out_and_says_so(server, tmp_path):
    settings = settings_for("openai/gpt-5-mini", server.openai_base)
    checked = check_models(settings)
    assert "temperature" not in checked.params and checked.params["max_tokens"] == 256
    assert any("temperature=0.0 is not sent" in note for note in checked.notes)
    calls, episodes = run_checked(settings, tmp_path)
    assert [c["error"] for c in calls] == [None] * 3
    sent = chat_bodies(server)
    assert all("temperature" not in body and body["max_completion_tokens"] == 256 for body in sent)
    assert [c["reasoning_tokens"] for c in calls] == [server.reasoning_tokens] * 3
    assert sum(e["reasoning_tokens"] for e in episodes) == 3 * server.reasoning_tokens


def test_a_parameter_the_user_set_that_the_model_refuses_is_a_config_error(server):
    settings = settings_for("openai/gpt-5-mini", server.openai_base, "model.params.temperature=0.0")
    refused = r"model.params.temperature: openai/gpt-5-mini refuses temperature=0.0"
    with pytest.raises(ConfigError, match=refused):
        check_models(settings)
    assert chat_bodies(server) == []  # nothing was sent


def price_of(model: str) -> dict:
    return litellm.model_cost[model]


def test_openai_cache_reads_and_reasoning_are_billed_at_their_own_prices(server, tmp_path):
    calls, episodes = run_checked(settings_for("openai/gpt-5-mini", server.openai_base), tmp_path)
    price = price_of("gpt-5-mini")
    assert calls[1]["cache_read_tokens"] > 0  # the system prompt repeats: the provider read it from cache
    for call in calls:
        uncached = call["prompt_tokens"] - call["cache_read_tokens"]
        invoice = (uncached * price["input_cost_per_token"]
                   + call["cache_read_tokens"] * price["cache_read_input_token_cost"]
                   + call["completion_tokens"] * price["output_cost_per_token"])
        assert call["cost_usd"] == pytest.approx(invoice, rel=1e-9)
        assert call["cache_write_tokens"] == 0
    assert sum(e["cost_usd"] for e in episodes) == pytest.approx(sum(c["cost_usd"] for c in calls), rel=1e-9)


def test_anthropic_caches_the_marked_system_message_written_once_then_read(server, tmp_path):
    calls, _ = run_checked(settings_for("anthropic/claude-sonnet-4-5", server.anthropic_base), tmp_path)
    system = chat_bodies(server)[0]["system"]
    assert system[-1]["cache_control"] == {"type": "ephemeral"}  # the marker reached the provider
    assert calls[0]["cache_write_tokens"] > 0 and calls[0]["cache_read_tokens"] == 0
    assert [c["cache_read_tokens"] for c in calls[1:]] == [calls[0]["cache_write_tokens"]] * 2
    price = price_of("claude-sonnet-4-5")
    for call in calls:
        uncached = call["prompt_tokens"] - call["cache_read_tokens"] - call["cache_write_tokens"]
        invoice = (uncached * price["input_cost_per_token"]
                   + call["cache_read_tokens"] * price["cache_read_input_token_cost"]
                   + call["cache_write_tokens"] * price["cache_creation_input_token_cost"]
                   + call["completion_tokens"] * price["output_cost_per_token"])
        assert call["cost_usd"] == pytest.approx(invoice, rel=1e-9)


def test_with_prompt_caching_off_nothing_is_marked_and_every_prompt_token_is_billed_in_full(server, tmp_path):
    calls, _ = run_checked(settings_for("anthropic/claude-sonnet-4-5", server.anthropic_base,
                                        "model.prompt_caching=off"), tmp_path)
    assert all(isinstance(body["system"], str) or "cache_control" not in json.dumps(body["system"])
               for body in chat_bodies(server))
    assert {(c["cache_read_tokens"], c["cache_write_tokens"]) for c in calls} == {(0, 0)}


def test_a_configured_price_bills_cache_reads_at_its_cache_read_price(server, tmp_path):
    calls, _ = run_checked(settings_for("openai/gpt-5-mini", server.openai_base,
                                        "+model.price={input_per_token: 1.0e-6, output_per_token: 4.0e-6, "
                                        "cache_read_per_token: 1.0e-7}"), tmp_path)
    read = calls[1]["cache_read_tokens"]
    assert read > 0
    expected = (calls[1]["prompt_tokens"] - read) * 1e-6 + read * 1e-7 + calls[1]["completion_tokens"] * 4e-6
    assert calls[1]["cost_usd"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
def test_the_command_line_runs_a_reasoning_model_to_the_end_and_records_what_it_sent(server, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "model=litellm", "model.name=openai/gpt-5-mini",
         f"model.api_base={server.openai_base}", "embedder=hashing", "stream.num_tasks=4",
         "stream.tuning_size=0", "cache.enabled=false", "progress=false", "ray.include_dashboard=false",
         f"hydra.run.dir={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "temperature=0.0 is not sent" in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["model_params"] == {"max_tokens": 256}
    runs = pl.read_parquet(out / "runs")
    assert json.loads(runs["model_params"][0]) == {"max_tokens": 256}
    calls = pl.read_parquet(out / "llm_calls")
    assert calls["error"].null_count() == 4 and calls["reasoning_tokens"].to_list() == [64] * 4


def test_a_dollar_budget_on_a_model_with_no_price_is_a_config_error(server):
    settings = settings_for("openai/fake", server.openai_base, "budget.max_cost_usd=0.01")
    with pytest.raises(ConfigError, match=r"budget.max_cost_usd: litellm knows no price for openai/fake"):
        check_models(settings)


def test_a_dollar_budget_stops_a_run_once_its_cache_priced_spend_reaches_it(server, tmp_path):
    calls, episodes = run_checked(settings_for("anthropic/claude-sonnet-4-5", server.anthropic_base,
                                               "budget.max_cost_usd=0.0002"), tmp_path)
    sent = [c for c in calls if c["error"] is None]
    assert sum(c["cost_usd"] for c in sent[:-1]) < 0.0002 <= sum(c["cost_usd"] for c in sent)
    assert [e["attempted"] for e in episodes].count(False) == 3 - len(sent)


def test_the_scripted_model_can_emulate_a_warm_prompt_cache_and_fill_the_columns():
    from tests.conftest import run_variant

    cold = run_variant("stream.num_tasks=3")
    warm = run_variant("stream.num_tasks=3", "model.scripted.prompt_cache_min_tokens=8")
    assert {c["cache_read_tokens"] for c in cold.rows["llm_calls"]} == {0}
    acts = [c for c in warm.rows["llm_calls"] if c["purpose"] == "act"]
    assert acts and all(0 < c["cache_read_tokens"] < c["prompt_tokens"] for c in acts)
    assert len({c["cache_read_tokens"] for c in acts}) == 1  # the same system message: the same prefix


def test_a_playbook_agents_later_calls_read_its_prompt_from_the_cache_at_the_read_price(server, tmp_path):
    settings = settings_for("openai/gpt-5-mini", server.openai_base, "variant=playbook")
    calls, _ = run_checked(settings, tmp_path)
    price = price_of("gpt-5-mini")
    acts = [c for c in calls if c["purpose"] == "act"]
    assert all(c["cache_read_tokens"] > 0 for c in acts[1:])
    for call in acts:
        invoice = ((call["prompt_tokens"] - call["cache_read_tokens"]) * price["input_cost_per_token"]
                   + call["cache_read_tokens"] * price["cache_read_input_token_cost"]
                   + call["completion_tokens"] * price["output_cost_per_token"])
        assert call["cost_usd"] == pytest.approx(invoice, rel=1e-9)


@pytest.mark.parametrize("model, base, dropped", [
    ("openai/gpt-5-mini", "openai_base", {"temperature"}),
    ("openai/o4-mini", "openai_base", {"temperature"}),
    ("anthropic/claude-sonnet-4-5", "anthropic_base", set()),
    ("gemini/gemini-2.5-flash", "gemini_base", set())])
def test_todays_models_run_with_the_default_config_and_an_api_base(server, tmp_path, model, base, dropped):
    settings = settings_for(model, getattr(server, base))
    checked = check_models(settings)
    assert set(settings.model.requested_params) - set(checked.params) == dropped
    calls, episodes = run_checked(settings, tmp_path)
    assert [c["error"] for c in calls] == [None] * 3 and len(episodes) == 3
    assert all(c["cost_usd"] is not None and c["cost_usd"] > 0 for c in calls)
