"""The manifest: the versions of the harness's packages and of those the planned env declares."""

import ast
import importlib
import importlib.metadata
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from envs.base import Environment
from harness.agent_run.plan import build_plan
from harness.driver.manifest import CORE_PACKAGES, env_packages, recorded, start_manifest
from tests.conftest import compose_config, scripted_settings

ROOT = Path(__file__).resolve().parents[2]
ENV_CONFIGS = sorted((ROOT / "conf" / "env").glob("*.yaml"))


def canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def env_class(config: Path) -> type[Environment]:
    target = OmegaConf.load(config).get("_target_")
    if target is None:  # a preset on another env's yaml (env=gsm8k on env=dataset): as composed
        target = compose_config(f"env={config.stem}").env["_target_"]
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def imported_distributions(module: str) -> set[str]:
    """The pip distributions a module imports (at any depth, lazily or not), the standard library,
    the harness's own packages and pydantic (a core package) aside."""
    tree = ast.parse(Path(sys.modules[module].__file__).read_text())
    tops = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
            for alias in node.names}
    tops |= {node.module.split(".")[0] for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    owners = importlib.metadata.packages_distributions()
    third_party = tops - set(sys.stdlib_module_names) - {"envs", "harness", "pydantic", "__future__"}
    return {canonical(owners[top][0]) for top in third_party if top in owners}


@pytest.mark.parametrize("config", ENV_CONFIGS, ids=lambda p: p.stem)
def test_every_env_declares_the_distributions_it_imports(config):
    cls = env_class(config)
    declared = {canonical(name) for name in cls.packages}
    assert imported_distributions(cls.__module__) <= declared


def test_the_manifest_holds_the_core_packages_and_the_planned_envs_own():
    settings = scripted_settings("stream.num_tasks=2")
    specs = build_plan(settings, Path("/tmp"))
    manifest = start_manifest(settings, specs, resumes=0, resolved_config=None)
    assert list(manifest.packages) == [*CORE_PACKAGES, "countryinfo"]
    assert manifest.packages["countryinfo"] == importlib.metadata.version("countryinfo")


def test_an_env_not_in_the_old_hard_coded_list_has_its_version_recorded():
    specs = [SimpleNamespace(env_cfg={"_target_": "envs.scienceworld.ScienceWorldTasks"}),
             SimpleNamespace(env_cfg={"_target_": "envs.countries.CountryFacts"}),
             SimpleNamespace(env_cfg={"_target_": "envs.scienceworld.ScienceWorldTasks"})]
    assert env_packages(specs) == ["scienceworld", "py4j", "countryinfo"]


def test_a_failed_job_says_why_in_its_manifest(tmp_path):
    settings = scripted_settings("stream.num_tasks=2")
    manifest = start_manifest(settings, build_plan(settings, tmp_path), resumes=0, resolved_config=None)
    with pytest.raises(RuntimeError), recorded(manifest, tmp_path):
        assert json.loads((tmp_path / "manifest.json").read_text())["status"] == "running"
        raise RuntimeError("the writer died")
    written = json.loads((tmp_path / "manifest.json").read_text())
    assert written["status"] == "failed" and written["error"] == "RuntimeError: the writer died"
    assert written["finished_at"] and set(written["tables"]) and not any(written["tables"].values())
