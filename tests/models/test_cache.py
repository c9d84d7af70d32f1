"""The response cache: identical deterministic requests are answered from disk, billed by policy."""

import asyncio

from harness.models.gateway import Gateway
from harness.models.model_client import CallRequest
from tests.conftest import run_variant, scripted_settings


def test_a_warm_cache_replays_a_run_with_identical_rows_and_no_model_calls(tmp_path):
    options = ("variant=memory", "stream.num_tasks=6", "cache.enabled=true", f"cache.dir={tmp_path}",
               "model.scripted.accuracy=0.5", "model.price.input_per_token=0.001")
    cold = run_variant(*options)
    warm = run_variant(*options)
    assert not any(c["cached"] for c in cold.rows["llm_calls"])
    assert all(c["cached"] for c in warm.rows["llm_calls"])
    assert warm.gateway.inner.provider_calls == 0
    for column in ("response", "success", "total_tokens", "cost_usd"):
        assert [e[column] for e in warm.rows["episodes"]] == [e[column] for e in cold.rows["episodes"]]


def test_a_cached_answer_is_free_when_charging_is_off(tmp_path):
    options = ("stream.num_tasks=3", "cache.enabled=true", f"cache.dir={tmp_path}",
               "model.price.input_per_token=0.001")
    run_variant(*options)
    free = run_variant(*options, "cache.charge=false")
    assert all(c["cached"] and c["cost_usd"] == 0 for c in free.rows["llm_calls"])


def test_sampled_requests_are_never_cached(tmp_path):
    settings = scripted_settings("cache.enabled=true", f"cache.dir={tmp_path}")
    gateway = Gateway([settings.model, settings.embedder], cache=settings.cache)
    request = CallRequest(model="scripted/oracle", purpose="act", run_id="r", task_id="t", attempt=1,
                          messages=[{"role": "user", "content": "hi"}],
                          params={"temperature": 0.7, "seed": 1})
    first = asyncio.run(gateway.call(request))
    second = asyncio.run(gateway.call(request))
    assert not first.record.cached and not second.record.cached


def test_a_different_scripted_model_does_not_share_answers(tmp_path):
    run_variant("stream.num_tasks=3", "cache.enabled=true", f"cache.dir={tmp_path}",
                "model.scripted.accuracy=0")
    other = run_variant("stream.num_tasks=3", "cache.enabled=true", f"cache.dir={tmp_path}",
                        "model.scripted.accuracy=1")
    assert not any(c["cached"] for c in other.rows["llm_calls"])
    assert all(e["success"] for e in other.rows["episodes"])


def test_one_shared_gateway_honours_each_runs_own_cache_settings(tmp_path):
    """A sweep's jobs may share a gateway: `-m cache.charge=true,false` must bill each job its own way."""
    settings = scripted_settings("cache.enabled=true", f"cache.dir={tmp_path}",
                                 "model.price.input_per_token=0.001")
    gateway = Gateway([settings.model, settings.embedder], cache=settings.cache)
    charged = settings.cache
    free = charged.model_copy(update={"charge": False})
    off = charged.model_copy(update={"enabled": False})
    caches = {"charged": charged, "free": free, "off": off}

    def ask(run_id: str):
        request = CallRequest(model="scripted/oracle", purpose="act", run_id=run_id, task_id="t",
                              attempt=1, messages=[{"role": "user", "content": "capital of France?"}],
                              params={"temperature": 0.0}, cache=caches[run_id])
        return asyncio.run(gateway.call(request)).record

    first = ask("charged")
    assert not first.cached and first.cost_usd > 0
    again, gratis, uncached = ask("charged"), ask("free"), ask("off")
    assert again.cached and again.cost_usd == first.cost_usd
    assert gratis.cached and gratis.cost_usd == 0
    assert not uncached.cached and uncached.cost_usd == first.cost_usd
    assert gateway.provider_calls == 2
