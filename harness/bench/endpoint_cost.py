"""`python -m harness.bench endpoint`: the CPU an outside agent's call through the run's endpoint
costs against a native agent's call.

Both sides call one `AgentModelClient` over an in-process gateway that answers every call at once with
the same reply and usage (`InstantGateway`), so the model and the gateway cost nothing and the same on
both sides; what is left is the calling:

- native: `await llm.complete(messages)` on the run's event loop, as a native agent calls;
- endpoint: the `openai` SDK's `OpenAI` client against a started `HttpEndpoint`
  (harness/agent_run/endpoint.py), from a thread of its own, as agents/external.py runs an outside
  agent's sync `solve` (one executor job per round: a solve making many calls);
- endpoint, stream: the same with `stream=True`, every chunk read. The SDK closes a stream's
  response at `data: [DONE]`, before the chunked body's end, so its connection is not reused: each
  streamed call opens a connection of its own (openai/openai-python#3440), on both sides' CPU;
- endpoint, async: `AsyncOpenAI` on the run's loop itself, as an outside agent's async `solve` runs.

The sides run in rounds, interleaved (each round runs every side once, the first side rotating), so
they share the machine's noise. Per side: this process's CPU (`time.process_time`: the endpoint, the
client and the gateway together) per call, the median over rounds; the event loop thread's share (the
endpoint's side: aiohttp, the request's checks, the client's call, the reply) and, for a client in a
thread, that thread's (the SDK's side), from `time.thread_time` in each thread; the CPU more than the
native call's (the median over rounds of the round's difference) and the ratio. Wall time per call is
shown, not compared: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from harness.agent_run.endpoint import HttpEndpoint
from harness.bench.common import table
from harness.clock import utc_now
from harness.models.model_client import AgentModelClient, CallRequest, CallResult
from harness.tables.records import LLMCall

MODEL = "scripted/bench"
REPLY = "Paris"
MESSAGES = [{"role": "system", "content": "Answer with the name of the capital city only."},
            {"role": "user", "content": "What is the capital of France?"}]
TARGET_MS = 2.0
"""The endpoint may cost at most this much more CPU per call than a native call (issue 29)."""


class InstantGateway:
    """A GatewayLink that answers every chat call at once: the same reply, usage and record."""

    def __init__(self) -> None:
        record = LLMCall(call_id="bench", run_id="bench", episode_id=None, task_id=None, attempt=1,
                         purpose="act", model=MODEL, prompt_tokens=24, completion_tokens=1,
                         total_tokens=25, cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=0,
                         usage_source="provider", cost_usd=0.0, latency_s=0.0, queued_s=0.0, retries=0,
                         cached=False, error=None, run_in_flight=0, started_at=utc_now())
        self.result = CallResult(text=REPLY, record=record)
        self.calls = 0

    async def call(self, request: CallRequest) -> CallResult:
        self.calls += 1
        return self.result


@dataclass
class Side:
    """One way of making calls, and what each round of them cost."""

    name: str
    client: str
    make: Callable[[int], Awaitable[tuple[float, int]]]
    """Makes n calls; returns the CPU seconds of the client's own thread (0: none of its own) and
    the reply's characters read (a check that the calls were answered)."""
    own_thread: bool = False
    """The client runs in a thread of its own: the loop thread's CPU is the endpoint's side alone."""
    rounds: list[dict[str, float]] = field(default_factory=list)


def sync_calls(client: Any, n: int, stream: bool) -> tuple[float, int]:
    """n calls from this thread, as an outside agent's sync code makes them; its CPU seconds."""
    started, read = time.thread_time(), 0
    for _ in range(n):
        if stream:
            for chunk in client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True):
                read += sum(len(choice.delta.content or "") for choice in chunk.choices)
        else:
            reply = client.chat.completions.create(model=MODEL, messages=MESSAGES)
            read += len(reply.choices[0].message.content or "")
    return time.thread_time() - started, read


async def timed_round(side: Side, calls: int) -> dict[str, float]:
    wall, cpu, loop_cpu = time.perf_counter(), time.process_time(), time.thread_time()
    client_cpu, read = await side.make(calls)
    loop_cpu, cpu, wall = time.thread_time() - loop_cpu, time.process_time() - cpu, time.perf_counter() - wall
    if read != calls * len(REPLY):
        raise RuntimeError(f"{side.name}: {read} characters of replies read, not {calls * len(REPLY)}")
    return {"cpu": cpu / calls, "loop": loop_cpu / calls, "client": client_cpu / calls, "wall": wall / calls}


async def measure(calls: int, rounds: int) -> list[Side]:
    """Every side, `calls` calls a round, `rounds` rounds interleaved (after a warm-up round)."""
    from openai import AsyncOpenAI, OpenAI  # lazy: seconds to import, and only this measurement's

    gateway = InstantGateway()
    llm = AgentModelClient(gateway, MODEL, run_id="bench")
    endpoint = await HttpEndpoint(llm).start()
    thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="outside-agent")
    sync = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
    in_loop = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
    loop = asyncio.get_running_loop()

    async def native(n: int) -> tuple[float, int]:
        return 0.0, sum([len((await llm.complete(MESSAGES)).text) for _ in range(n)])

    async def in_thread(n: int, stream: bool = False) -> tuple[float, int]:
        return await loop.run_in_executor(thread, sync_calls, sync, n, stream)

    async def on_loop(n: int) -> tuple[float, int]:
        replies = [await in_loop.chat.completions.create(model=MODEL, messages=MESSAGES) for _ in range(n)]
        return 0.0, sum(len(reply.choices[0].message.content or "") for reply in replies)

    async def streamed(n: int) -> tuple[float, int]:
        return await in_thread(n, stream=True)

    sides = [Side("native", "await llm.complete(messages)", native),
             Side("endpoint", "OpenAI (sync) in a thread", in_thread, own_thread=True),
             Side("endpoint, stream", "OpenAI (sync) in a thread, stream=True", streamed, own_thread=True),
             Side("endpoint, async", "AsyncOpenAI on the run's loop", on_loop)]
    try:
        for side in sides:
            await timed_round(side, min(calls, 20))  # warm: imports, the connection, first-call paths
        for round_ in range(rounds):
            for i in range(len(sides)):
                side = sides[(round_ + i) % len(sides)]
                side.rounds.append(await timed_round(side, calls))
                llm.take_records()  # as the runner takes them after each episode
    finally:
        sync.close()
        await in_loop.close()
        thread.shutdown()
        await endpoint.close()
    if gateway.calls != len(sides) * (min(calls, 20) + rounds * calls):
        raise RuntimeError(f"the gateway saw {gateway.calls} calls, not one per call made")
    return sides


def rows(sides: list[Side], calls: int) -> list[dict[str, Any]]:
    """One row per side: CPU per call in ms (medians over rounds), against the native side."""
    native = sides[0]

    def median_ms(side: Side, key: str) -> float:
        return 1000 * statistics.median(r[key] for r in side.rounds)

    def more_ms(side: Side, key: str) -> float:
        pairs = zip(side.rounds, native.rounds, strict=True)
        return 1000 * statistics.median(r[key] - n["cpu"] for r, n in pairs)

    return [{"side": side.name, "client": side.client, "calls x rounds": f"{calls} x {len(side.rounds)}",
             "CPU ms per call": median_ms(side, "cpu"), "more than native ms": more_ms(side, "cpu"),
             "/ native": median_ms(side, "cpu") / median_ms(native, "cpu"),
             "loop thread ms": median_ms(side, "loop"),
             "endpoint side more ms": more_ms(side, "loop") if side.own_thread else None,
             "client thread ms": median_ms(side, "client") if side.own_thread else None,
             "wall ms per call": median_ms(side, "wall")} for side in sides]


def verdict(result: list[dict[str, Any]]) -> str:
    """Per side through the endpoint: the CPU per call more than native, against the target."""
    def met(ms: float) -> str:
        return "met" if ms <= TARGET_MS else "NOT met"

    lines = []
    for row in result[1:]:
        whole = row["more than native ms"]
        line = f"{row['side']} ({row['client']}): "
        if row["endpoint side more ms"] is not None:
            side = row["endpoint side more ms"]
            line += f"the endpoint's side {side:.2f} ms more CPU per call than native ({met(side)}); "
        lines.append(f"{line}the whole process, the openai SDK included, {whole:.2f} ms more, "
                     f"{row['/ native']:.1f}x ({met(whole)})")
    return "\n".join([f"target: <= {TARGET_MS:g} ms more CPU per call than a native call", *lines])


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.bench endpoint", description=" ".join(
        __doc__.split("\n\n")[0].replace("`", "").split()))
    parser.add_argument("--calls", type=int, default=100, help="calls per side in each round (default 100)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds, every side once in each (default 10)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    started = time.perf_counter()
    sides = asyncio.run(measure(args.calls, args.rounds))
    result = rows(sides, args.calls)
    print("\n## The run's OpenAI-compatible endpoint: CPU per call against a native call\n")
    print(table(result))
    print("\n(an in-process gateway that answers at once: the model and the gateway cost nothing; CPU: this"
          " process's, median over rounds;\n more than native: median over rounds of the round's difference;"
          " loop thread: the run's event loop, where the\n endpoint serves (aiohttp, the request's checks,"
          " the client's call, the reply) and where an async client runs;\n endpoint side more: the loop"
          " thread's CPU more than a native call's; client thread: the openai SDK in its own thread)\n")
    print(verdict(result))
    print(f"\nbench took {time.perf_counter() - started:.0f} s")
