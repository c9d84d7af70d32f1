"""What a call cost: each kind of token at its own price, the config's, else litellm's map.

A price the config gives (a local model's is its server's) is told to litellm too
(`tell_litellm_the_price`), once litellm is imported: litellm prices every response itself, inside
each call, and for a model its map does not know it would search its fallbacks every time. A reply
of the lean path (harness/models/direct.py) is priced as litellm's cost function prices the same
reply; a model no price is known for costs None, never a silent zero.
"""

from __future__ import annotations

import logging
from types import ModuleType, SimpleNamespace
from typing import Any

from harness.config import EndpointSettings, ModelSettings, Price
from harness.models.cache import CachedAnswer
from harness.models.direct import PROVIDER as DIRECT_PROVIDER
from harness.models.direct import as_json, may_have_a_price
from harness.models.lazy_litellm import load_litellm, when_loaded
from harness.models.param_map import litellm_logs_at

priced_routes: set[str] = set()
"""Every route the config priced, in litellm's map or bound for it: litellm prices by them too."""


def price(settings: EndpointSettings) -> Price | None:
    """The per-token price the config gives (a local model's is its server's), if any."""
    if isinstance(settings, ModelSettings) and settings.serves_locally and settings.local_server:
        return settings.local_server.price
    return settings.price


def tell_litellm_the_price(settings: EndpointSettings, route: str) -> None:
    """litellm prices every response itself, inside each call; for a model its map does not know
    (a local or in-process model) it searches its fallbacks every time, about a tenth of the CPU of a
    call. Registering the price the config gives makes that one lookup."""
    given = price(settings)
    if given is None:
        return
    cache_prices = {name: value for name, value in (
        ("cache_read_input_token_cost", given.cache_read_per_token),
        ("cache_creation_input_token_cost", given.cache_write_per_token)) if value is not None}
    entry = {route: {
        "input_cost_per_token": given.input_per_token, "output_cost_per_token": given.output_per_token,
        **cache_prices, "litellm_provider": route.split("/", 1)[0],
        "mode": "chat" if isinstance(settings, ModelSettings) else "embedding"}}
    priced_routes.add(route)
    when_loaded(lambda litellm: _register_prices(litellm, entry))  # now, or once litellm is imported


def _register_prices(litellm: ModuleType, entries: dict[str, dict[str, Any]]) -> None:
    with litellm_logs_at(logging.ERROR):  # it warns that cache-token prices default to 0: true, and moot here
        litellm.register_model(entries)


class Pricing:
    """A gateway's pricer: it asks litellm's map about the model of a direct reply once."""

    def __init__(self) -> None:
        self._unpriced: set[str] = set()
        """Models of direct replies that litellm's price map does not know (asked once each)."""

    def cost(self, settings: EndpointSettings, response: Any, answer: CachedAnswer) -> float | None:
        """Each kind of token at its own price: the config's, else litellm's map (its cost function
        knows cache-read, cache-write and tiered prices)."""
        given = price(settings)
        if given is not None:
            return given.cost(answer.prompt_tokens, answer.completion_tokens, answer.cache_read_tokens or 0,
                              answer.cache_write_tokens or 0)
        if isinstance(response, SimpleNamespace):  # a direct reply (harness/models/direct.py)
            return self._direct_cost(response)
        try:
            return float(load_litellm().completion_cost(completion_response=response))
        except Exception:  # no price known for this model: unknown, never silently zero
            return None

    def _direct_cost(self, response: SimpleNamespace) -> float | None:
        """What litellm's cost function makes of the same reply (priced by the model it names)."""
        model = str(getattr(response, "model", ""))
        if model in self._unpriced:
            return None
        if not may_have_a_price(model, priced_routes):  # a scan of litellm's names: once per model
            self._unpriced.add(model)
            return None
        try:
            litellm = load_litellm()
            reply = litellm.ModelResponse(**as_json(response))
            return float(litellm.completion_cost(completion_response=reply,
                                                 custom_llm_provider=DIRECT_PROVIDER))
        except Exception:
            self._unpriced.add(model)
            return None
