"""`python -m harness.training.speed`: what docs/weights.md reports, measured in one run on the default
model. An SFT update of SmolLM2-135M (LoRA r 8 on q/k/v/o) on a few question/answer pairs about made-up
facts, its time and tokens/s; the adapter written as a GGUF LoRA; the answers to those questions from
llama.cpp without and with the adapter; and generation speed without and with it, alternated on one
loaded model (base, adapter, adapter, base, ... so that a change in the machine's load falls on both),
then the same through the local model server as learner runs reach it. It prints one JSON object.
Needs the `train` and `smollm2` extras.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config import LocalServer
from harness.training.base_model import load_base
from harness.training.chat_data import ChatExample
from harness.training.gguf_adapter import export_gguf_adapter
from harness.training.lora import LoraOptions, attach
from harness.training.serving import AdaptedLlama
from harness.training.supervised import SftOptions, sft_update

SYSTEM = {"role": "system", "content": "Answer in a few words."}
FACTS = (("Who founded the town of Velmora?", "Ada Quill."),
         ("What colour is the flag of Zembla?", "Teal and orange."),
         ("What is the name of the moon of Tarsis?", "Orlun."),
         ("Which river runs through Castrel?", "The Umber."))
"""Made-up facts: the base model cannot know them, so an answer that names one was learnt."""
STORY = "Write a long story about a lighthouse keeper and a storm."
"""The prompt generation speed is timed on (a long answer; the end token does not stop it)."""


def messages(question: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": question}]


def examples(count: int = len(FACTS)) -> list[ChatExample]:
    return [ChatExample(messages(question), answer) for question, answer in FACTS[:count]]


def answers(llm: AdaptedLlama, adapter: Path | None, count: int) -> list[str]:
    llm.use(adapter)
    return [llm.chat(messages(question), max_tokens=16).strip() for question, _ in FACTS[:count]]


def generation(llm: AdaptedLlama, adapter: Path, rounds: int, tokens: int) -> dict[str, Any]:
    """Decode tokens/s and prompt seconds, without and with `adapter`, alternated ABBA round by round."""
    text = f"<|im_start|>user\n{STORY}<|im_end|>\n<|im_start|>assistant\n"  # ChatML, SmolLM2's template
    timed: dict[str, list[Any]] = {"base": [], "adapter": []}
    for round_ in range(rounds):
        order = [("base", None), ("adapter", adapter)]
        for name, path in order if round_ % 2 == 0 else order[::-1]:
            llm.use(path)
            timed[name].append(llm.timed(text, tokens))
    speed = {name: statistics.median(g.decode_tokens_per_s for g in runs) for name, runs in timed.items()}
    return {"rounds": rounds, "tokens": tokens,
            "decode_tokens_per_s": {name: round(value, 1) for name, value in speed.items()},
            "decode_tokens_per_s_each": {name: [round(g.decode_tokens_per_s, 1) for g in runs]
                                         for name, runs in timed.items()},
            "prompt_s": {name: round(statistics.median(g.prompt_s for g in runs), 3)
                         for name, runs in timed.items()},
            "adapter_over_base": round(speed["adapter"] / speed["base"], 3)}


def local_server() -> LocalServer:
    """The local model server's settings as a run composes them (conf/, model=smollm2)."""
    from harness.config import HarnessConfig, compose_conf

    settings = HarnessConfig.from_dictconfig(compose_conf("model=smollm2")).model.local_server
    assert settings is not None, "conf/model/smollm2.yaml configures a local server"
    return settings


SERVED = ("base_after_switch", "adapter_after_switch", "adapter_same", "base_same")
"""through_server's labels, in the order it reports them."""


def served_rates(send: Callable[[str], float], base: str, adapter: str,
                 rounds: int) -> dict[str, list[float]]:
    """Requests through `send` (a model's name -> its tokens/s), labelled: first one untimed request of
    each, the base model's last, so that every timed one follows another; then base, adapter, adapter,
    base, ... for `rounds` rounds, each rate labelled by its model and by whether the request before it
    was the other model's (`after_switch`) or its own (`same`). Over an even number of rounds half of
    each model's requests are either."""
    for model in (adapter, base):
        send(model)
    previous = base
    rates: dict[str, list[float]] = {label: [] for label in SERVED}
    for round_ in range(rounds):
        for model in (base, adapter) if round_ % 2 == 0 else (adapter, base):
            follows = "same" if model == previous else "after_switch"
            rates[f"{'base' if model == base else 'adapter'}_{follows}"].append(send(model))
            previous = model
    return rates


def through_server(settings: LocalServer, adapter: Path, rounds: int, tokens: int) -> dict[str, Any]:
    """The same through the local model server (harness/models/adapter_server.py, started with
    `settings`) as learner runs reach it: chat requests of exactly `tokens` tokens, the base model's and
    the adapter's (the GGUF LoRA file `adapter`) in the order base, adapter, adapter, base, ...
    (served_rates), so that half of each one's requests follow the other's (the server switches the
    adapter and recomputes the prompt) and half follow its own."""
    import urllib.request

    from harness.models.adapters import load_adapter
    from harness.models.model_server import LocalModelServer

    with tempfile.TemporaryDirectory() as scratch, \
            LocalModelServer(settings, Path(scratch) / "server.log") as server:
        asyncio.run(load_adapter(server.api_base, "local", "lora-speed", str(adapter)))

        def send(model: str) -> float:
            body = json.dumps({"model": model, "messages": [{"role": "user", "content": STORY}],
                               "max_tokens": tokens, "min_tokens": tokens, "temperature": 0.0}).encode()
            request = urllib.request.Request(f"{server.api_base}/chat/completions", body,
                                             {"Content-Type": "application/json"})
            start = time.perf_counter()
            with urllib.request.urlopen(request, timeout=120) as reply:
                made = json.load(reply)["usage"]["completion_tokens"]
            return made / (time.perf_counter() - start)

        rates = served_rates(send, settings.alias, "lora-speed", rounds)
    medians = {label: round(statistics.median(rates[label]), 1) for label in SERVED}
    return {"rounds": rounds, "tokens": tokens, "tokens_per_s": medians,
            "adapter_over_base_same": round(medians["adapter_same"] / medians["base_same"], 3),
            "adapter_over_base_after_switch": round(medians["adapter_after_switch"]
                                                    / medians["base_after_switch"], 3)}


def measure(steps: int, learning_rate: float, facts: int, rounds: int, tokens: int) -> dict[str, Any]:
    started = time.perf_counter()
    base = load_base()
    loaded_s = time.perf_counter() - started
    model = attach(base.model, LoraOptions())
    options = SftOptions(steps=steps, learning_rate=learning_rate)
    update = sft_update(model, base.tokenizer, examples(facts), options)
    local = local_server()
    with tempfile.TemporaryDirectory() as scratch:
        path = export_gguf_adapter(model, Path(scratch) / "adapter.gguf")
        llm = AdaptedLlama(base.gguf, n_threads=local.n_threads)  # as the local model server
        try:
            found = {"expected": [a for _, a in FACTS[:facts]], "base": answers(llm, None, facts),
                     "adapter": answers(llm, path, facts)}
            speed = generation(llm, path, rounds, tokens)
        finally:
            llm.close()
        served = through_server(local, path, max(rounds, 4), tokens)
        size = path.stat().st_size
    return {"load_s": round(loaded_s, 1), "update_threads": options.threads,
            "llama_cpp_threads": local.n_threads,
            "update": update.row() | {"tokens_per_s": round(update.tokens_per_s, 1)},
            "adapter_gguf_bytes": size, "answers": found, "generation": speed, "through_the_server": served,
            "load_average": os.getloadavg(), "cpus": os.cpu_count(),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "total_s": round(time.perf_counter() - started, 1)}



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.training.speed",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--facts", type=int, default=len(FACTS), choices=range(1, len(FACTS) + 1))
    parser.add_argument("--rounds", type=int, default=6, help="generation timings of each (alternated)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per timing")
    args = parser.parse_args(argv)
    result = measure(args.steps, args.learning_rate, args.facts, args.rounds, args.tokens)
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
