"""The response cache: content-addressed on the full request, on disk, shared by every job.

The key is a hash of what decides the answer: the model and what stands behind it (its weights
file, or the scripted model's settings), the messages or texts, and the parameters. Only
deterministic requests are cached (temperature 0; embeddings), and only successful answers. One
file per key, written to a temporary name and renamed, so any number of processes can share the
directory. litellm's own disk cache is gone from the version pinned here, hence this small one.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.config import EndpointSettings, ModelSettings
from harness.files import write_text_atomically
from harness.models.chat import ToolCall
from harness.models.model_client import CallRequest


class CachedAnswer(BaseModel):
    text: str | None = None
    tool_calls: list[ToolCall] = []
    vectors: list[list[float]] | None = None
    prompt_tokens: int
    completion_tokens: int
    usage_source: str
    cost_usd: float | None
    cache_read_tokens: int | None = None
    """Of prompt_tokens, read from the provider's prompt cache (None: unknown, e.g. an answer
    cached before the harness kept these)."""
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


def cacheable(request: CallRequest) -> bool:
    return request.kind == "embed" or float(request.params.get("temperature", 1.0) or 0.0) == 0.0


def request_key(settings: EndpointSettings, request: CallRequest) -> str:
    identity: dict[str, Any] = {"model": settings.name, "kind": request.kind, "messages": request.messages,
                                "texts": request.texts, "params": request.params}
    if request.cache_scope:  # else the key a run without repeats has always had
        identity["scope"] = request.cache_scope
    if request.adapter is not None:  # other weights: another model
        identity["adapter"] = request.adapter.hash
    if isinstance(settings, ModelSettings):
        if settings.scripted is not None:  # its rules may answer by purpose
            identity["scripted"] = settings.scripted.model_dump()
            identity["purpose"] = request.purpose
        if settings.serves_locally and settings.local_server is not None:
            identity["weights"] = [settings.local_server.package, settings.local_server.file]
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


class ResponseCache:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> CachedAnswer | None:
        try:
            return CachedAnswer.model_validate_json(self._path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, answer: CachedAnswer) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, answer.model_dump_json())
