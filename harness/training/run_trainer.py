"""The `Trainer` of one learner run (harness.agent_api.Trainer): an update trained, priced, recorded
and served.

An update is identified by everything that decides its result: the base model, the adapter it
starts from, the kind, the examples, the options and the run's seed. Its adapter is saved under
`adapters/<run_id>/<that key>/` in the run directory with `update.json` (the update's figures), so a
resumed run that replays its stream finds each update done and continues from the same adapter (the
same hash) without training again; its row says `reused`.

After an update the run's model client serves every later call with the new adapter
(`AgentModelClient.adapter`), and the run's ledger is charged its tokens, dollars and FLOPs. Two
backends train: `transformers` (the local model: `weights_host.LoraWeights`, in a Ray actor of the
run's own where Ray runs, reserved `training.memory_gb`) and `scripted` (the scripted model's
stand-in: its adapter is the examples themselves, which the scripted model answers from; nothing
is trained, and every row says so).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from harness.agent_api import LearningExample, Recorder, TrainOptions, WeightUpdate
from harness.clock import utc_now
from harness.models.model_client import AgentModelClient, ServedAdapter
from harness.tables.records import TrainingRow
from harness.training.accounting import training_flops
from harness.training.learner import LearnerSpec
from harness.training.weights_host import saved_update

log = logging.getLogger(__name__)

ADAPTERS = "adapters"
UPDATE_FILE = "update.json"


class Backend(Protocol):
    name: str

    async def train(self, kind: str, examples: list[LearningExample], options: TrainOptions,
                    previous: Path | None, previous_adapter: str | None, directory: Path) -> dict[str, Any]:
        """One update; its figures as `accounting.UpdateResult`'s fields."""

    async def close(self) -> None: ...


def update_key(base: str, previous: str | None, kind: str, examples: list[LearningExample],
               options: TrainOptions, seed: int) -> str:
    identity = {"base": base, "previous": previous, "kind": kind, "seed": seed,
                "options": options.model_dump(mode="json"),
                "examples": [example.model_dump(mode="json") for example in examples]}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


@dataclass(eq=False)
class RunTrainer:
    """One learner run's adapter: trains it (through its backend), serves it, prices and records it."""

    backend: Backend
    llm: AgentModelClient
    recorder: Recorder
    run_id: str
    run_dir: Path
    base: str
    seed: int
    train_price: float
    adapter: str | None = field(default=None, init=False)
    """The hash of the adapter the run is served with now; None: the base model."""
    directory: Path | None = field(default=None, init=False)
    """Where that adapter is saved."""
    updates: int = field(default=0, init=False)

    async def update(self, kind: Literal["sft", "dpo"], examples: list[LearningExample],
                     options: TrainOptions) -> WeightUpdate:
        chosen = examples[-options.max_examples:]
        if kind == "dpo" and any(example.rejected is None for example in chosen):
            raise ValueError("a DPO update needs a rejected reply in every example")
        key = update_key(self.base, self.adapter, kind, chosen, options, self.seed)
        directory = self.run_dir / ADAPTERS / self.run_id / key[:16]
        started_at = utc_now()
        figures = saved_update(directory)
        reused = figures is not None
        if figures is None:
            directory.mkdir(parents=True, exist_ok=True)
            figures = await self.backend.train(kind, chosen, options, self.directory, self.adapter, directory)
            (directory / UPDATE_FILE).write_text(json.dumps(figures, sort_keys=True))
        previous = self.adapter
        self.updates += 1
        self._serve(figures["adapter_hash"], directory)
        cost = figures["tokens_trained"] * self.train_price
        flops = figures["flops"]
        self.llm.ledger.train(figures["tokens_trained"], cost, flops)
        self.recorder.emit(
            TrainingRow, update=self.updates, kind=kind, trainer=self.backend.name, examples=len(chosen),
            examples_own=sum(example.source == "own" for example in chosen),
            examples_revealed=sum(example.source == "revealed" for example in chosen),
            steps=figures["steps"], tokens_trained=figures["tokens_trained"],
            loss_before=figures["loss_before"], loss_after=figures["loss_after"], wall_s=figures["wall_s"],
            cpu_s=figures["cpu_s"], flops=flops, cost_usd=cost, adapter=self.adapter,
            previous_adapter=previous, reused=reused, started_at=started_at)
        return WeightUpdate(update=self.updates, adapter=self.adapter, examples=len(chosen),
                            loss_before=figures["loss_before"], loss_after=figures["loss_after"])

    def saved(self) -> Path | None:
        return self.directory

    async def adopt(self, directory: Path | None) -> None:
        figures = saved_update(directory) if directory is not None else None
        if directory is not None and figures is None:
            raise ValueError(f"{directory} holds no adapter ({UPDATE_FILE} is missing)")
        self._serve(figures["adapter_hash"] if figures is not None else None, directory)

    def _serve(self, adapter: str | None, directory: Path | None) -> None:
        """Serve the run's later calls with this adapter (None: the base model); the server knows it
        by a name its hash gives."""
        self.adapter, self.directory = adapter, directory
        self.llm.adapter = (ServedAdapter(name=f"lora-{adapter[:16]}", hash=adapter, path=str(directory))
                            if adapter is not None else None)

    async def close(self) -> None:
        await self.backend.close()


class ScriptedBackend:
    """The scripted model's stand-in for training: the adapter is the examples (each prompt's last user
    turn and its reply, added to the previous adapter's), which the scripted model answers from when a
    call is served with it (harness/models/scripted.py). Tokens are counted with litellm's tokenizer,
    as the scripted model's calls are; FLOPs at model.parameters where it is set; no loss."""

    name = "scripted"

    def __init__(self, parameters: int | None) -> None:
        self.parameters = parameters

    async def train(self, kind: str, examples: list[LearningExample], options: TrainOptions,
                    previous: Path | None, previous_adapter: str | None, directory: Path) -> dict[str, Any]:
        from harness.models.scripted import SCRIPTED_ADAPTER, conversation_tokens, last_user_turn

        clock, cpu = time.perf_counter(), time.process_time()
        replies = json.loads((previous / SCRIPTED_ADAPTER).read_text())["replies"] if previous else {}
        one_pass = 0
        for example in examples:
            prompt = last_user_turn(example.messages)
            replies[prompt] = example.reply
            one_pass += sum(conversation_tokens([*example.messages, {"role": "assistant", "content": reply}])
                            for reply in (example.reply, example.rejected) if reply is not None)
        body = json.dumps({"replies": replies}, sort_keys=True).encode()
        (directory / SCRIPTED_ADAPTER).write_bytes(body)
        tokens = one_pass * options.steps
        return {"kind": kind, "examples": len(examples), "steps": options.steps, "tokens_trained": tokens,
                "target_tokens": 0, "loss_before": None, "loss_after": None,
                "wall_s": time.perf_counter() - clock, "cpu_s": time.process_time() - cpu,
                "flops": training_flops(self.parameters, tokens) if self.parameters else None,
                "adapter_hash": hashlib.sha256(body).hexdigest()}

    async def close(self) -> None:
        pass


class TransformersBackend:
    """LoRA updates of the local model (harness/training/weights_host.py), in a Ray actor of the run's
    own where Ray is running (num_cpus 0, memory `training.memory_gb`: Ray starts no more learners
    than the node's memory holds and queues the rest), else in a thread of this process."""

    name = "transformers"

    def __init__(self, gguf: str | None, seed: int, run_id: str) -> None:
        self.gguf, self.seed, self.run_id = gguf, seed, run_id
        self._actor: Any = None
        self._local: Any = None

    async def train(self, kind: str, examples: list[LearningExample], options: TrainOptions,
                    previous: Path | None, previous_adapter: str | None, directory: Path) -> dict[str, Any]:
        arguments = (kind, [example.model_dump(mode="json") for example in examples],
                     options.model_dump(mode="json"), str(previous) if previous else None, previous_adapter,
                     str(directory))
        import ray

        if not ray.is_initialized():
            from harness.training.weights_host import LoraWeights

            self._local = self._local or LoraWeights(self.gguf, self.seed)
            return await asyncio.to_thread(self._local.train, *arguments)
        if self._actor is None:
            self._actor = self._start(options)
        return await self._actor.train.remote(*arguments)

    def _start(self, options: TrainOptions) -> Any:
        import ray

        from harness.training.weights_host import LoraWeights

        need = int(options.memory_gb * 2**30)
        free = ray.available_resources().get("memory")
        if free is not None and free < need:
            log.warning("learner run %s waits for memory: its trainer is reserved %.1f GB "
                        "(variant.training.memory_gb) and %.1f GB of the cluster's are free; it starts "
                        "when another learner ends", self.run_id, options.memory_gb, free / 2**30)
        # Its own process: transformers' progress bars for the GGUF's de-quantisation would go to
        # the driver's console through Ray's log forwarding.
        actor = ray.remote(LoraWeights).options(num_cpus=0, memory=need, max_concurrency=1,
                                                runtime_env={"env_vars": {"TQDM_DISABLE": "1"}})
        return actor.remote(self.gguf, self.seed)

    async def close(self) -> None:
        if self._actor is not None:
            import ray

            ray.kill(self._actor)
            self._actor = None
        self._local = None


def trainer_for(learner: LearnerSpec, llm: AgentModelClient, recorder: Recorder, run_id: str, run_dir: Path,
                seed: int) -> RunTrainer:
    """The trainer of a learner run, on the backend its model takes (decided by `learner_spec`:
    harness/training/learner.py)."""
    backend: Backend = (ScriptedBackend(learner.parameters) if learner.backend == "scripted"
                        else TransformersBackend(learner.gguf, seed, run_id))
    return RunTrainer(backend, llm, recorder, run_id, run_dir, learner.base, seed, learner.train_price)
