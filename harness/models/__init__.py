"""Models: the one door (`gateway`) and everything behind it; the only package that imports litellm.

`gateway` sends every call through litellm with retries and accounts it in one row; `model_client`
is what agents hold (`await llm.complete(...)`); `limits` (shared concurrency, pacing, 429 back-off),
`budget` (the run's ledger) and `cache` (the response cache) sit on the way; `providers`,
`scripted`, `embeddings` and `minilm` answer inside the process; `model_server` starts the local
llama.cpp server; `local_http` and `wire_server` are local HTTP models for tests and the bench.
"""
