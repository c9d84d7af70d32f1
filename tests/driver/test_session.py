"""One way to start a pool: harness/driver/session.py `start_pool` starts Ray (or attaches to it), the
pool's actors (or leases the warm pool's) and the model servers, for a single run's job session and
for a sweep (harness/driver/multirun.py, to which Hydra's launcher hands every sweep) alike; nothing
else does any of it."""

from __future__ import annotations

import ast
import contextlib
from collections import defaultdict
from pathlib import Path

from harness.config import RaySettings
from harness.driver import session
from harness.driver.pool import AgentPool
from tests.test_structure import imported_names, modules

POOL_STARTERS = ("ray_session", "lease_warm_pool", "start_workers", "serve_models")
"""What starts a part of a pool: Ray, the warm pool's lease, the pool's own actors, the model servers."""
START_POOL = "harness.driver.session.start_pool"
OUTSIDE_A_POOL = {"ray_session": {"harness.warm.serve"}}
"""The warm pool's own process starts its Ray, in which its keeper starts each generation of actors
(harness/driver/pool.py `spawn_pool_actors`); a command's pool comes from `start_pool`."""


def callers() -> dict[str, set[str]]:
    """Each name called in harness/ and hydra_plugins/ -> the functions that call it (module.qualname)."""
    found: dict[str, set[str]] = defaultdict(set)

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, f"{where}.{child.name}")
                continue
            if isinstance(child, ast.Call):
                called = child.func
                name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", None)
                if name:
                    found[name].add(where)
            visit(child, where)

    for module, path in modules().items():
        if module.startswith(("harness", "hydra_plugins")):
            visit(ast.parse(path.read_text()), module)
    return found


def test_nothing_but_start_pool_starts_ray_the_pools_actors_or_its_model_servers():
    called = callers()
    for starter in POOL_STARTERS:
        assert called[starter] == {START_POOL, *OUTSIDE_A_POOL.get(starter, ())}, starter


def test_a_single_run_and_a_sweep_start_their_pools_through_the_same_function():
    called = callers()
    assert called["start_pool"] == {"harness.driver.session.start_job_session",
                                    "harness.driver.multirun.Sweep._launch"}
    assert "harness.driver.run.run_specs" in called["start_job_session"]  # python -m harness, a snapshot's
    assert called["launch_sweep"] == {"hydra_plugins.harness_ray_launcher.ray_launcher.RayLauncher.launch"}


def test_the_launcher_reaches_the_harness_through_the_sweep_and_hydras_insides_only():
    """The sweep (harness/driver/multirun.py), and for the launcher's set-up Hydra's insides
    (harness/driver/hydra_insides.py, which imports only Hydra's and OmegaConf's)."""
    launcher = modules()["hydra_plugins.harness_ray_launcher.ray_launcher"]
    assert sorted(name for name in imported_names(launcher) if name.split(".")[0] == "harness") == [
        "harness.driver.hydra_insides", "harness.driver.multirun"]
    insides = imported_names(modules()["harness.driver.hydra_insides"])
    assert {name.split(".")[0] for name in insides} <= {"copy", "hydra", "omegaconf"}, insides


def _fake_parts(monkeypatch, lease: AgentPool | None) -> list[str]:
    """start_pool's parts replaced by recorders: what it did, in order."""
    done: list[str] = []

    @contextlib.contextmanager
    def ray_session(settings):
        done.append("ray")
        yield "10.0.0.1:6379", "http://127.0.0.1:8265"

    def lease_warm_pool(stack, num_workers, agent_runs):
        done.append("lease")
        return lease

    def start_workers(settings, stack, name, agent_runs):
        done.append(f"workers {name} for {agent_runs}")
        return AgentPool(name, None, [], ())

    monkeypatch.setattr(session, "ray_session", ray_session)
    monkeypatch.setattr(session, "lease_warm_pool", lease_warm_pool)
    monkeypatch.setattr(session, "start_workers", start_workers)
    monkeypatch.setattr(session, "serve_models", lambda pool, models, log_dir, stack: done.append(
        f"serve {models} on {pool.limits_name}"))
    return done


def _start(address: str | None, done: list[str]) -> AgentPool:
    settings = RaySettings(address=address, num_workers=None, include_dashboard=True, limits=None)

    def models() -> list:
        done.append("models asked")
        return []

    with contextlib.ExitStack() as stack:
        return session.start_pool(settings, stack, "sweep-1", Path("logs"), models, agent_runs=4)


def test_start_pool_starts_ray_then_the_workers_then_asks_for_the_models_while_they_import(monkeypatch):
    done = _fake_parts(monkeypatch, lease=None)
    pool = _start(None, done)
    assert done == ["ray", "workers sweep-1 for 4", "models asked", "serve [] on sweep-1"]
    assert (pool.ray_address, pool.dashboard_url) == ("10.0.0.1:6379", "http://127.0.0.1:8265")


def test_on_the_warm_pool_it_leases_the_generation_and_starts_workers_only_when_another_command_holds_it(
        monkeypatch):
    done = _fake_parts(monkeypatch, lease=AgentPool("harness-warm-3", None, [], ()))
    assert _start("warm", done).limits_name == "harness-warm-3"
    assert done == ["ray", "lease", "models asked", "serve [] on harness-warm-3"]
    done = _fake_parts(monkeypatch, lease=None)
    assert _start("warm", done).limits_name == "sweep-1"
    assert done == ["ray", "lease", "workers sweep-1 for 4", "models asked", "serve [] on sweep-1"]
