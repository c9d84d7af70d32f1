"""litellm, imported where it is first needed, and the providers it answers with inside this process.

Importing litellm costs seconds of CPU, so nothing imports it with a module: `load_litellm` imports it
the first time a call or a check needs it (a worker whose calls all go on the lean path,
harness/models/direct.py, never does), and runs then what was waiting for it (`when_loaded`: the
prices the config gives, harness/models/pricing.py). The in-process providers (`IN_PROCESS`,
harness/models/providers.py) are litellm's custom providers: each is made, and litellm imported,
when a model of its prefix is first registered.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from harness.models.minilm import MINILM_PREFIX

_waiting: list[Callable[[ModuleType], None]] = []
"""What runs once litellm is imported (`when_loaded`)."""


@functools.cache
def load_litellm() -> ModuleType:
    """litellm, imported the first time a call or a check needs it (a warm pool's workers: ahead of
    them); at once after that."""
    import litellm

    litellm.suppress_debug_info = True
    for hook in _waiting:
        hook(litellm)
    _waiting.clear()
    return litellm


def litellm_loaded() -> bool:
    return load_litellm.cache_info().currsize > 0


def when_loaded(hook: Callable[[ModuleType], None]) -> None:
    """Run `hook` with litellm now if it is imported, else when it is, if it ever is."""
    if litellm_loaded():
        hook(load_litellm())
    else:
        _waiting.append(hook)


def is_litellm_error(error: BaseException, names: tuple[str, ...]) -> bool:
    """Whether `error` is one of litellm's errors of these names (none is, where litellm is not loaded)."""
    if "litellm" not in sys.modules:
        return False
    litellm = sys.modules["litellm"]  # perhaps still being imported by another thread
    kinds = tuple(kind for name in names if isinstance(kind := getattr(litellm, name, None), type))
    return bool(kinds) and isinstance(error, kinds)


def _scripted() -> Any:
    from harness.models.scripted import ScriptedRouter

    return ScriptedRouter()


def _hashing() -> Any:
    from harness.models.embeddings import HashingEmbedding

    return HashingEmbedding()


def _minilm() -> Any:
    from harness.models.embeddings import MiniLMEmbedding

    return MiniLMEmbedding()


IN_PROCESS: dict[str, Callable[[], Any]] = {"scripted": _scripted, "hashing": _hashing,
                                           MINILM_PREFIX: _minilm}
"""litellm providers that answer inside the gateway's process (harness/models/providers.py), by prefix:
each made (and litellm imported) when a model of its prefix is first registered."""


def in_process(name: str) -> bool:
    """Whether a provider of `IN_PROCESS` answers the model `name`."""
    return name.split("/", 1)[0] in IN_PROCESS


def answer_in_process(litellm: ModuleType, prefix: str, handler: Any) -> None:
    """litellm sends the calls of `prefix/...` models to `handler` in this process from now on."""
    litellm.custom_provider_map = [*[p for p in litellm.custom_provider_map if p["provider"] != prefix],
                                   {"provider": prefix, "custom_handler": handler}]
