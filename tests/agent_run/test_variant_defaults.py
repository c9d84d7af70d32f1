"""conf/variant is the one source of a variant's settings: every variant composes from `parts/base.yaml`,
and where the code has a default of its own, it is the yaml's value."""

import inspect
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from agents.memory_store import EpisodicMemory
from harness.agent_run.assembly import HARNESS_OPTIONS, HarnessOptions
from harness.sandbox import Sandbox
from tests.conftest import CONF_DIR, compose_config

VARIANT_DIR = CONF_DIR / "variant"
VARIANTS = sorted(p.stem for p in VARIANT_DIR.glob("*.yaml"))
NOT_CONSTRUCTOR_ARGUMENTS = {"name", "_target_", "start_from"}  # read by the planner, not the agent


def composed(variant: str) -> dict[str, Any]:
    return OmegaConf.to_container(compose_config(f"variant={variant}").variant)


def code_defaults(cls: type) -> dict[str, Any]:
    """Constructor defaults along the class's bases, the most derived first (options travel up as
    **kwargs)."""
    defaults: dict[str, Any] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for name, parameter in inspect.signature(init).parameters.items():
            if parameter.kind is parameter.KEYWORD_ONLY or parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
                defaults.setdefault(name, parameter.default)
    return defaults


def disagreements(values: dict[str, Any], defaults: dict[str, Any], where: str) -> list[str]:
    found = []
    for key, value in values.items():
        if key not in defaults:
            found.append(f"{where}.{key}: no constructor takes it")
        elif defaults[key] is not inspect.Parameter.empty and defaults[key] != value:
            found.append(f"{where}.{key}: yaml {value!r}, code {defaults[key]!r}")
    return found


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_code_defaults_of_every_variant_are_its_yamls_values(variant):
    cfg = composed(variant)
    agent_side = {k: v for k, v in cfg.items() if k not in NOT_CONSTRUCTOR_ARGUMENTS | set(HARNESS_OPTIONS)}
    sections = {"memory": EpisodicMemory, "sandbox": Sandbox}  # a section's code default is None: absent
    problems = disagreements({k: v for k, v in agent_side.items() if not isinstance(v, dict)},
                             code_defaults(get_class(cfg["_target_"])), f"variant={variant}")
    for section, component in sections.items():
        if isinstance(cfg.get(section), dict):
            problems += disagreements(cfg[section], code_defaults(component), f"variant.{section}")
    assert not problems, "\n".join(problems)


def test_the_harness_side_options_default_to_the_base_yamls_values():
    base = OmegaConf.to_container(OmegaConf.load(VARIANT_DIR / "parts" / "base.yaml"))
    assert {k: base[k] for k in HARNESS_OPTIONS} == HarnessOptions().model_dump()


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_starts_from_the_base_and_names_itself(variant):
    cfg = composed(variant)
    assert cfg["name"] == variant
    assert set(OmegaConf.to_container(OmegaConf.load(VARIANT_DIR / "parts" / "base.yaml"))) <= set(cfg)


def test_the_variant_files_repeat_few_lines():
    lines = {path: [line.strip() for line in path.read_text().splitlines() if line.strip()]
             for path in Path(VARIANT_DIR).rglob("*.yaml")}
    files_with = Counter(line for kept in lines.values() for line in set(kept))
    repeated = sum(1 for kept in lines.values() for line in kept if files_with[line] > 1)
    assert repeated / sum(map(len, lines.values())) < 0.15
