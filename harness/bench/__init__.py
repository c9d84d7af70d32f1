"""`python -m harness.bench`: the harness measured side by side, never by timed tests.

`measures` holds the benchmarks of the harness itself (throughput, gateway overhead, memory
retrieval, the local model's tokens; its `main` is the command); `endpoint` (`python -m harness.bench
endpoint`) the CPU of an outside agent's call through the run's OpenAI-compatible endpoint against a
native call; `sweep` (`python -m harness.bench.sweep`) measures a sweep through the CLI against a
local HTTP model; `view` (`python -m harness.bench.view`) the viewer at any size.
"""
