"""Models: the one door (`gateway`) and everything behind it; the only package that imports litellm.

`gateway` sends every call through litellm with retries and accounts it in one row (`direct` is its
lean path to an OpenAI-compatible server, sending parameters as `param_map` says litellm would;
`pricing` says what a call cost); `capabilities` is what litellm knows of a model, asked before
anything starts; `lazy_litellm` imports litellm where it is first needed and registers the providers
that answer inside the process; `model_client` is what agents hold (`await llm.complete(...)`), `chat`
what a call carries across (the reply, its function calls, the JSON-in-text protocol); `limits`
(shared concurrency, pacing, 429 back-off), `budget` (the run's ledger), `cache` (the response cache)
and `loop_clock` (which seconds of a call were the harness's) sit on the way; `providers`, `scripted`,
`embeddings` and `minilm` answer inside the process; `model_server` starts the local llama.cpp server
(`adapter_server`, which serves LoRA adapters too, each loaded by the gateway through `adapters`);
`local_http` and `wire_server` are local HTTP models for tests and the bench. Nothing here imports
litellm on import of the package; its face (`__all__`) is the modules the other rooms use.
"""

__all__ = ["adapter_server", "adapters", "capabilities", "chat", "gateway", "lazy_litellm", "limits",
           "local_http", "minilm", "model_client", "model_server", "param_map", "scripted"]
