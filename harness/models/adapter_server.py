"""The local model server: llama-cpp-python's OpenAI-compatible server, which also serves LoRA
adapters the way vLLM does (`python -m harness.models.adapter_server`, the same arguments as
`python -m llama_cpp.server`).

Calls that name the base model are answered exactly as `llama_cpp.server` answers them (its own app
and handlers, unchanged). Two routes are added, vLLM's runtime LoRA API:
`POST /v1/load_lora_adapter {"lora_name", "lora_path"}` and `POST /v1/unload_lora_adapter
{"lora_name"}`; a call whose model is an adapter's name is answered by the one loaded base model with
that adapter set on its context (llama.cpp applies LoRA per context at run time), so any number of
learner runs share one server. `lora_path` is a GGUF LoRA file or a directory holding one as
`adapter.gguf` beside peft's files (harness/training/weights_host.py writes both; vLLM reads the
latter).

It relies on one private name of llama-cpp-python's server, the module global `_llama_proxy` that
its handlers read the model from (tests/models/test_adapter_server.py checks it is there, naming the
installed version): the proxy is wrapped so that it sets the adapter the request's model names.
Requests are answered one at a time (the server's own lock), so switching adapters never races.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path
from typing import Any

GGUF_ADAPTER = "adapter.gguf"


def adapter_file(path: str) -> Path:
    """The GGUF LoRA at `path`: the file, or `adapter.gguf` in the directory."""
    candidate = Path(path)
    return candidate / GGUF_ADAPTER if candidate.is_dir() else candidate


class LoraSwitch:
    """Sets a llama.cpp context's LoRA adapter, loading each adapter file against the model once
    (a file written again, with a new modification time, is loaded again). A switch clears the KV
    cache: its tokens were computed with the other adapter, and llama-cpp-python would otherwise
    reuse a matching prompt prefix from them."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[Path, int], Any] = {}
        self.current: Path | None = None

    def use(self, llama: Any, adapter: Path | None, scale: float = 1.0) -> None:
        import llama_cpp

        if adapter is not None:
            adapter = Path(adapter).resolve()
        if adapter == self.current:
            return
        if adapter is None:
            failed = llama_cpp.llama_set_adapters_lora(llama._ctx.ctx, None, 0, None)
        else:
            key = (adapter, adapter.stat().st_mtime_ns)
            if key not in self._loaded:
                loaded = llama_cpp.llama_adapter_lora_init(llama._model.model, str(adapter).encode())
                if not loaded:
                    raise RuntimeError(f"llama.cpp could not load the LoRA adapter {adapter}")
                self._loaded[key] = loaded
            handles = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(self._loaded[key])
            scales = (ctypes.c_float * 1)(scale)
            failed = llama_cpp.llama_set_adapters_lora(llama._ctx.ctx, handles, 1, scales)
        if failed:
            raise RuntimeError(f"llama.cpp could not set the adapter {adapter} on its context")
        llama.reset()
        self.current = adapter

    def close(self, llama: Any) -> None:
        import llama_cpp

        if self.current is not None:
            self.use(llama, None)
        for loaded in self._loaded.values():
            llama_cpp.llama_adapter_lora_free(loaded)
        self._loaded.clear()


class AdapterProxy:
    """llama_cpp.server's model proxy, with adapters: the base model for its alias, the base model
    with an adapter set for an adapter's name."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.adapters: dict[str, Path] = {}
        self.switch = LoraSwitch()

    def __call__(self, model: str | None = None) -> Any:
        adapter = self.adapters.get(model or "")
        llama = self.inner(None if adapter is not None else model)
        self.switch.use(llama, adapter)
        return llama

    def __iter__(self) -> Any:
        yield from self.inner
        yield from self.adapters

    def __getitem__(self, model: str) -> Any:
        return self.inner[model]

    def free(self) -> None:
        self.inner.free()


def build_app(argv: list[str]) -> tuple[Any, Any]:
    """llama_cpp.server's app with the adapter routes, and its server settings."""
    from fastapi import Body
    from fastapi.responses import JSONResponse, PlainTextResponse
    from llama_cpp.server import app as server
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(description="llama_cpp.server with vLLM's runtime LoRA API")
    add_args_from_model(parser, Settings)
    args = parser.parse_args(argv)
    server_settings = parse_model_from_args(ServerSettings, args)
    app = server.create_app(server_settings=server_settings,
                            model_settings=[parse_model_from_args(ModelSettings, args)])
    proxy = AdapterProxy(server._llama_proxy)
    server._llama_proxy = proxy

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(body: dict[str, Any] = Body(...)) -> Any:  # noqa: B008 - FastAPI's idiom
        name, path = str(body.get("lora_name") or ""), str(body.get("lora_path") or "")
        if not name or not path:
            return JSONResponse({"error": "lora_name and lora_path are required"}, status_code=400)
        if name in proxy.adapters:
            return JSONResponse({"error": f"The lora adapter '{name}' has already been loaded."},
                                status_code=400)
        file = adapter_file(path)
        if not file.is_file():
            return JSONResponse({"error": f"no GGUF LoRA adapter at {file}"}, status_code=404)
        proxy.adapters[name] = file
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(body: dict[str, Any] = Body(...)) -> Any:  # noqa: B008
        name = str(body.get("lora_name") or "")
        if proxy.adapters.pop(name, None) is None:
            return JSONResponse({"error": f"The lora adapter '{name}' cannot be found."}, status_code=404)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    return app, server_settings


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    app, settings = build_app(sys.argv[1:] if argv is None else argv)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")


if __name__ == "__main__":
    main()
