"""Section 5 of `python -m harness.bench`: the real local model (SmolLM2 on llama-cpp-python): completion
tokens per second through the harness's gateway against calling the same server directly, the same
prompts interleaved call by call on warm connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from harness.agent_run.components import build_environment
from harness.agent_run.plan import build_plan
from harness.bench.common import bench_settings
from harness.config import HarnessConfig, endpoint_key
from harness.models.gateway import Gateway
from harness.models.model_client import CallRequest
from harness.models.model_server import LocalModelServer

Timed = tuple[int, float, float]
"""One call as the bench timed it: completion tokens, wall seconds, this process's CPU seconds."""


def local_model_tokens(prompts: int, rounds: int = 2, model: str = "smollm2") -> dict[str, Any]:
    """The real local model through the harness's gateway (in-process: litellm, endpoint settings,
    limits, record) against the same server called directly (http.client on one kept-alive
    connection), with the same prompts and the model's configured parameters, call by call.

    Each side is warmed up first; then each prompt goes to both sides back to back, the harness first
    in half the pairs and the server directly first in the other half (each prompt both ways when
    `rounds` is even), so neither side always gets the server's prompt cache. Both rates are
    completion tokens over the seconds the bench timed around each call; the overhead is the median
    over prompts of harness minus direct, averaged over the prompt's rounds; its CPU is the median
    of harness minus direct in this process's CPU time per call: the client's own work, which waiting
    for a busy machine's cores does not stretch as it does the wall time (it takes in whatever else
    this process runs meanwhile: litellm's logging after a reply, a Ray driver's threads)."""
    settings = bench_settings(f"model={model}", f"stream.num_tasks={prompts}")
    endpoint = settings.model
    server_settings = endpoint.local_server
    assert endpoint.serves_locally and server_settings is not None, f"model={model} is not served locally"
    conversations = _bench_conversations(settings)
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        with warnings.catch_warnings():  # started by fork (a pre-exec hook) and exec'd at once: no risk
            warnings.filterwarnings("ignore", "lancedb fork support", RuntimeWarning)
            server = stack.enter_context(LocalModelServer(server_settings, Path(directory) / "server.log"))
        gateway = Gateway([endpoint], local_servers={endpoint.name: server.api_base})
        direct = stack.enter_context(contextlib.closing(_DirectClient(
            server.port, server_settings.alias, dict(endpoint.params), endpoint.timeout_s)))
        pairs = asyncio.run(_paired_calls(_GatewayClient(gateway, settings), direct, conversations, rounds))
    return _token_rates(pairs, len(conversations), rounds)


def _bench_conversations(settings: HarnessConfig) -> list[list[dict[str, str]]]:
    """The variant's system prompt and each planned task's first observation."""
    system = settings.variant.kwargs()["system_prompt"]
    spec = build_plan(settings, Path(tempfile.gettempdir()))[0]
    env = build_environment(spec.env_cfg)
    return [[{"role": "system", "content": system},
             {"role": "user", "content": env.reset(task).observation}] for task in spec.tasks]


class _DirectClient:
    """The local model server called directly: http.client on one kept-alive connection."""

    def __init__(self, port: int, alias: str, params: dict[str, Any], timeout_s: float) -> None:
        self.alias, self.params = alias, params
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)

    async def complete(self, messages: list[dict[str, str]]) -> int:
        """Completion tokens of one chat completion (blocking: the comparison runs one call at a time)."""
        body = json.dumps({"model": self.alias, **self.params, "messages": messages})
        for attempt in range(2):
            try:
                self.connection.request("POST", "/v1/chat/completions", body,
                                        {"Content-Type": "application/json"})
                reply = self.connection.getresponse()
                answer = json.loads(reply.read())
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # The server closed the kept-alive connection (idle past its keep-alive timeout,
                # e.g. on a loaded machine): reconnect once, as a pooling client (litellm's) does.
                self.connection.close()
                if attempt:
                    raise
        if reply.status != 200:
            raise RuntimeError(f"local model server answered {reply.status}: {answer}")
        return int(answer["usage"]["completion_tokens"])

    def close(self) -> None:
        self.connection.close()


class _GatewayClient:
    """The same server through the harness's gateway, with the model's configured parameters."""

    def __init__(self, gateway: Gateway, settings: HarnessConfig) -> None:
        self.gateway, self.endpoint = gateway, settings.model

    async def complete(self, messages: list[dict[str, str]]) -> int:
        result = await self.gateway.call(CallRequest(
            model=self.endpoint.name, endpoint=endpoint_key(self.endpoint), messages=messages, purpose="act",
            run_id="bench", task_id=None, attempt=1, params=dict(self.endpoint.params)))
        if result.record.error is not None:
            raise RuntimeError(f"gateway call failed: {result.record.error}")
        return result.record.completion_tokens


async def _paired_calls(harness: _GatewayClient, direct: _DirectClient,
                        conversations: list[list[dict[str, str]]], rounds: int
                        ) -> list[tuple[int, dict[str, Timed]]]:
    """Each conversation to both sides back to back, `rounds` times, alternating which goes first."""
    sides = {"harness": harness, "direct": direct}

    async def timed(side: str, messages: list[dict[str, str]]) -> Timed:
        started, cpu = time.perf_counter(), time.process_time()
        tokens = await sides[side].complete(messages)
        return tokens, time.perf_counter() - started, time.process_time() - cpu

    warm_up = [{"role": "user", "content": "Hello"}]
    await timed("harness", warm_up)  # connections opened, litellm's first-call imports paid
    await timed("direct", warm_up)
    pairs = []
    for round_ in range(rounds):
        for i, messages in enumerate(conversations):
            order = ["harness", "direct"] if (round_ + i) % 2 == 0 else ["direct", "harness"]
            pairs.append((i, {side: await timed(side, messages) for side in order}))
    return pairs


def _token_rates(pairs: list[tuple[int, dict[str, Timed]]], prompts: int, rounds: int) -> dict[str, Any]:
    def rate(side: str) -> float:
        return sum(p[side][0] for _, p in pairs) / sum(p[side][1] for _, p in pairs)

    overheads: dict[int, list[float]] = {}
    for i, pair in pairs:
        overheads.setdefault(i, []).append(pair["harness"][1] - pair["direct"][1])
    overhead_s = statistics.median([statistics.fmean(d) for d in overheads.values()])
    extra_cpu_s = statistics.median([pair["harness"][2] - pair["direct"][2] for _, pair in pairs])
    same = sum(pair["harness"][0] == pair["direct"][0] for _, pair in pairs)
    return {"prompts": prompts, "rounds": rounds,
            "harness tok/s": rate("harness"), "direct tok/s": rate("direct"),
            "harness / direct": rate("harness") / rate("direct"),
            "overhead per call p50 ms": 1000 * overhead_s, "client CPU overhead p50 ms": 1000 * extra_cpu_s,
            "same completion tokens": f"{same}/{len(pairs)}"}
