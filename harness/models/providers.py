"""Providers that answer inside the gateway's process, registered with litellm like any other.

The scripted model (harness/models/scripted.py) and the local embedders (harness/models/embeddings.py) are
litellm custom providers; the gateway serves them exactly as it serves a remote one. What sets them
apart is only what a provider of this kind may do: route each endpoint (a model with its settings)
to its own model string, learn per-endpoint settings and the stream's answer key when the endpoint
is registered, and read the call's purpose (which the gateway passes to in-process providers only:
a remote provider never sees harness metadata).
"""

from __future__ import annotations

from typing import Any

from litellm import CustomLLM


class InProcessProvider(CustomLLM):
    def route(self, endpoint_key: str, name: str) -> str:
        """The litellm model string the gateway sends this endpoint's calls to."""
        return name

    def serve(self, route: str, name: str, settings: Any, answer_key: dict[str, str]) -> None:
        """Get ready to answer calls routed to `route` (the endpoint `name` with these settings)."""
