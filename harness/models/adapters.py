"""The client side of vLLM's runtime LoRA API, which the local model server speaks too
(harness/models/adapter_server.py): `POST /v1/load_lora_adapter {"lora_name", "lora_path"}` loads an
adapter, and a request whose model is its name is answered with it.

Each gateway asks each server once per adapter; a server that has it already (another replica of the
gateway asked first) answers 400 "already been loaded" (vLLM's words), which is taken as loaded.
"""

from __future__ import annotations

import asyncio

import aiohttp

ALREADY_LOADED = "already been loaded"


class AdapterLoadError(RuntimeError):
    pass


class AdapterLoads:
    """Adapters this gateway has had loaded, by server and name."""

    def __init__(self) -> None:
        self._loads: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def load(self, api_base: str, api_key: str, name: str, path: str) -> None:
        key = (api_base, name)
        if key not in self._loads:
            self._loads[key] = asyncio.ensure_future(load_adapter(api_base, api_key, name, path))
        try:
            await asyncio.shield(self._loads[key])
        except BaseException:
            self._loads.pop(key, None)  # asked again by the next call
            raise


async def load_adapter(api_base: str, api_key: str, name: str, path: str, timeout_s: float = 120) -> None:
    """Have the server at `api_base` (…/v1) load the LoRA adapter at `path` as `name`."""
    url = f"{api_base.rstrip('/')}/load_lora_adapter"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session, \
            session.post(url, json={"lora_name": name, "lora_path": path},
                         headers={"Authorization": f"Bearer {api_key}"}) as reply:
        body = await reply.text()
        if reply.status == 200 or (reply.status == 400 and ALREADY_LOADED in body):
            return
        raise AdapterLoadError(f"the server at {api_base} did not load the LoRA adapter {name} "
                               f"({path}): HTTP {reply.status} {body[:200]}")
