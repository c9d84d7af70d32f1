"""The local model server answers the base model as llama_cpp.server does, and LoRA adapters by vLLM's
runtime API (harness/models/adapter_server.py), which the gateway's learner calls use
(harness/models/adapters.py)."""

import asyncio
import json
import urllib.error
import urllib.request

import llama_cpp
import pytest

from harness.models.adapters import AdapterLoadError, load_adapter


def test_the_private_name_the_server_relies_on_is_where_it_was():
    """The one private use of llama-cpp-python's server: its module global `_llama_proxy`, read by every
    handler. An upgrade that moves it fails here, naming the version."""
    from llama_cpp.server import app, cli

    version = llama_cpp.__version__
    gone = f"is gone in llama-cpp-python {version}"
    assert hasattr(app, "_llama_proxy"), f"llama_cpp.server.app._llama_proxy {gone}"
    for module, name in ((app, "create_app"), (cli, "add_args_from_model"), (cli, "parse_model_from_args")):
        assert callable(getattr(module, name, None)), f"{module.__name__}.{name} {gone}"
    for name in ("llama_adapter_lora_init", "llama_set_adapters_lora", "llama_adapter_lora_free",
                 "llama_adapter_lora_p_ctypes"):
        assert hasattr(llama_cpp, name), f"llama_cpp.{name} {gone}"


def tiny_adapter(path, scale: float = 0.5):
    """A GGUF LoRA for SmolLM2 by hand: rank 4 on every layer's q projection, big enough to change replies."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 4.0)
    for layer in range(30):
        for part, shape in (("lora_a", (4, 576)), ("lora_b", (576, 4))):
            values = (rng.standard_normal(shape) * scale).astype("f4")
            writer.add_tensor(f"blk.{layer}.attn_q.weight.{part}", values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def ask(api_base: str, model: str, question: str = "What is the capital of France?") -> str:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": question}],
                       "max_tokens": 12, "temperature": 0.0}).encode()
    request = urllib.request.Request(f"{api_base}/chat/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.load(reply)["choices"][0]["message"]["content"]


@pytest.mark.e2e
def test_a_loaded_adapter_answers_by_its_name_and_the_base_answers_as_before(tmp_path):
    from harness.config import HarnessConfig
    from harness.models.model_server import LocalModelServer
    from tests.conftest import compose_config

    settings = HarnessConfig.from_dictconfig(compose_config("model=smollm2")).model.local_server
    (tmp_path / "lora").mkdir()
    tiny_adapter(tmp_path / "lora" / "adapter.gguf")
    with LocalModelServer(settings, tmp_path / "server.log") as server:
        base = ask(server.api_base, "smollm2")
        asyncio.run(load_adapter(server.api_base, "x", "lora-1", str(tmp_path / "lora")))
        # loaded already (another gateway replica asked first): taken as loaded
        asyncio.run(load_adapter(server.api_base, "x", "lora-1", str(tmp_path / "lora")))
        with urllib.request.urlopen(f"{server.api_base}/models") as reply:
            assert {m["id"] for m in json.load(reply)["data"]} == {"smollm2", "lora-1"}
        adapted = ask(server.api_base, "lora-1")
        assert adapted != base
        assert ask(server.api_base, "smollm2") == base  # switched back, the cache cleared
        assert ask(server.api_base, "lora-1") == adapted
        with pytest.raises(AdapterLoadError, match="HTTP 404"):
            asyncio.run(load_adapter(server.api_base, "x", "lora-2", str(tmp_path / "missing")))
        unload = urllib.request.Request(f"{server.api_base}/unload_lora_adapter",
                                        json.dumps({"lora_name": "lora-1"}).encode(),
                                        {"Content-Type": "application/json"})
        with urllib.request.urlopen(unload) as reply:
            assert reply.status == 200
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(unload)
