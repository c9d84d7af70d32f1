"""Shared fixtures: the real composed config, an in-process scripted gateway, one Ray session; and the
rule that keeps the suite's tiers (tests/tiers.py)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# No test reaches the Hugging Face hub (env=dataset's presets name hub datasets): set before anything
# imports `datasets` or `huggingface_hub`, which read it once; runs the tests start inherit it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest
from omegaconf import DictConfig

import harness  # noqa: F401  (sets the environment Ray workers inherit)
from harness.agent_api import Recorder
from harness.agent_run.components import build_environment
from harness.agent_run.plan import build_plan
from harness.agent_run.runner import RunOutcome, run_agent
from harness.agent_run.spec import CheckedParams, episode_ids
from harness.config import CONF_DIR as CONF_DIR  # the tests find conf/ here
from harness.config import HarnessConfig, compose_conf
from harness.models.gateway import Gateway
from harness.models.model_client import CallRequest, CallResult
from tests import tiers

# Before any test starts a process: what each starts, and the real models loaded below it.
_WATCH = tiers.Watch.install()



def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """An e2e test is a slow one, and so is one that uses a fixture that starts processes
    (`tiers.starts_processes`): `-m "not slow"` leaves them out."""
    for item in items:
        definitions = getattr(item, "_fixtureinfo", None)
        uses_processes = definitions is not None and any(
            tiers.declares_processes(d.func) for defs in definitions.name2fixturedefs.values() for d in defs)
        if (item.get_closest_marker("e2e") or uses_processes) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> Iterator[None]:
    before = _WATCH.count()
    yield
    started = _WATCH.launched_since(before)
    if started and not tiers.declares_processes(fixturedef.func):
        _WATCH.undeclared.append(f"fixture {fixturedef.argname!r} starts `{tiers.shown(started[0])}` without "
                                 "saying so: decorate it with `@tiers.starts_processes`")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any fixture of this test: a module's server started for its first test counts for it.
    _WATCH.restart()


@pytest.fixture(autouse=True)
def _tiers_hold(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    marks = {mark.name for mark in request.node.iter_markers()}
    wrong = (_WATCH.undeclared or [None])[0] or tiers.missing_marks(marks, _WATCH.started(),
                                                                     _WATCH.real_models())
    if wrong:
        pytest.fail(f"{request.node.nodeid}: {wrong} (tiers: tests/tiers.py)", pytrace=False)


def compose_config(*overrides: str) -> DictConfig:
    return compose_conf(*overrides)


def scripted_settings(*overrides: str) -> HarnessConfig:
    """The real default config with the scripted model, the hashing embedder, a short stream, and
    no response cache (a test that wants one turns it on with its own directory)."""
    cfg = compose_config("model=scripted", "embedder=hashing", "stream.num_tasks=6", "progress=false",
                         "cache.enabled=false", *overrides)
    return HarnessConfig.from_dictconfig(cfg)


class ListSink:
    """Collects rows in memory, as the writer would receive them."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.rows.setdefault(table, []).extend(rows)


class RecordingGateway:
    def __init__(self, inner: Gateway) -> None:
        self.inner = inner
        self.requests: list[CallRequest] = []

    async def call(self, request: CallRequest) -> CallResult:
        self.requests.append(request)
        return await self.inner.call(request)


@dataclass
class AgentRun:
    outcome: RunOutcome
    sink: ListSink
    gateway: RecordingGateway
    workdir: Path
    rows: dict = field(init=False)

    def __post_init__(self) -> None:
        self.rows = self.sink.rows

    def requests(self, purpose: str) -> list[CallRequest]:
        return [r for r in self.gateway.requests if r.purpose == purpose]


def run_variant(*overrides: str, gateway_type: type[RecordingGateway] = RecordingGateway) -> AgentRun:
    settings = scripted_settings(*overrides)
    workdir = Path(tempfile.mkdtemp(prefix="harness-test-"))
    spec = build_plan(settings, workdir)[0]
    answer_key = {t.question: t.answer for t in [*spec.tasks, *spec.tuning_tasks]}
    gateway = gateway_type(Gateway([settings.model, settings.embedder], answer_key=answer_key,
                                   cache=settings.cache))
    sink = ListSink()
    params = CheckedParams.as_asked(settings.model)
    outcome = asyncio.run(run_agent(spec, params, build_environment(spec.env_cfg), gateway, sink))
    return AgentRun(outcome, sink, gateway, workdir)


def replayed_run(overrides: list[str], finished: int) -> tuple[Path, list[dict[str, Any]]]:
    """An 8-task scripted run whose first `finished` episodes are replayed as a resume replays them:
    its final snapshot's directory and the episodes it wrote (tests/agents/test_replay.py)."""
    settings = scripted_settings(*overrides, "stream.num_tasks=8", "model.scripted.accuracy=0.5")
    workdir = Path(tempfile.mkdtemp(prefix="harness-replay-"))
    spec = build_plan(settings, workdir)[0]
    answers = {t.question: t.answer for t in [*spec.tasks, *spec.tuning_tasks]}
    gateway = Gateway([settings.model, settings.embedder], answer_key=answers, cache=settings.cache)
    sink = ListSink()
    asyncio.run(run_agent(spec, CheckedParams.as_asked(settings.model), build_environment(spec.env_cfg),
                          gateway, sink, episode_ids(spec)[:finished]))
    [snapshot] = [s for s in sink.rows["snapshots"] if s["final"]]
    return workdir / snapshot["path"], sink.rows["episodes"]


@pytest.fixture(scope="session")
@tiers.starts_processes
def ray_session() -> Iterator[None]:
    import ray

    from harness.driver.session import start_local_ray
    from harness.driver.startup import LOCAL_RAY_SYSTEM_CONFIG

    # address="local": never join a Ray that another run (or `ray start`) left on the machine. Metrics
    # reported every half second, as the metrics test's own Ray does (Ray's default, 10 s, outlasted a
    # run's gauge there when this Ray was the one its worker process had: tests/driver/test_metrics.py).
    start_local_ray(num_cpus=2, include_dashboard=False, logging_level="warning",
                    _system_config={**LOCAL_RAY_SYSTEM_CONFIG, "metrics_report_interval_ms": 500})
    yield
    ray.shutdown()


def taken_rows(recorder: Recorder) -> dict[str, list[dict[str, Any]]]:
    """The rows a recorder holds, by table, as the writer would receive them (and taken)."""
    return {table: [row.model_dump() for row in rows] for table, rows in recorder.take().items()}
