"""reasoning-gym: seeded procedural task generators, each scored by its own `score_answer`.

`env=reasoning_gym env.datasets=[leg_counting,basic_arithmetic]` picks generators by name; per-dataset
options (difficulty and the like) go in `env.options.<name>`. The datasets are regenerated from the
same seed in every worker, so a task is carried between processes by its index alone. Generating
an item can take a tenth of a second of sympy (puzzle24: 200 items in about 15 s), so each process
keeps the items it has generated, shared by every job of a sweep and every episode of a worker.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from envs.base import EnvEpisode, Environment, SingleTurnEpisode, Task

ANSWER_FORMAT = "Give your final answer between <answer> and </answer> tags."

_GENERATED: dict[tuple[str, int, int, str], dict[int, dict[str, Any]]] = {}
"""Items generated in this process, by dataset, size, seed and options, then index."""
_GENERATING = threading.Lock()  # a sweep's jobs plan in threads: one generates, the others wait


class ReasoningGymEpisode(SingleTurnEpisode):
    """Scored by the dataset's own `score_answer` (partial credit possible) on the text between
    <answer> tags, or on the whole reply when it has none."""

    def __init__(self, task: Task, dataset: Any, entry: dict[str, Any]) -> None:
        super().__init__(task)
        self._dataset = dataset
        self._entry = entry

    def extract(self, action: str) -> str:
        from reasoning_gym.utils import extract_answer

        tagged = extract_answer(action)
        return tagged if tagged is not None else action.strip()

    def grade(self, response: str) -> float:
        return float(self._dataset.score_answer(response, self._entry))


class ReasoningGym(Environment):
    packages = ("reasoning-gym",)
    family_option = "datasets"
    default_families = ("leg_counting",)
    interleaved_families = ("leg_counting", "basic_arithmetic", "letter_counting", "number_sorting")

    def __init__(self, datasets: Sequence[str] | None = None, size: int = 200, seed: int = 0,
                 options: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        import reasoning_gym

        datasets = self.default_families if datasets is None else datasets
        if not datasets:
            raise ValueError("env.datasets: at least one reasoning-gym dataset is needed")
        known = set(reasoning_gym.factory.DATASETS)
        unknown = sorted(set(datasets) - known)
        if unknown:
            raise ValueError(f"env.datasets: unknown {unknown}; e.g. {sorted(known)[:8]} "
                             f"({len(known)} in all)")
        if size <= 0:
            raise ValueError(f"env.size must be > 0, got {size}")
        options = options or {}
        self._keys = {name: (name, size, seed, json.dumps(options.get(name, {}), sort_keys=True, default=str))
                      for name in datasets}
        self._datasets = {name: reasoning_gym.create_dataset(name, size=size, seed=seed,
                                                             **dict(options.get(name, {})))
                          for name in datasets}

    def _entries(self, name: str, indices: range | list[int]) -> list[dict[str, Any]]:
        with _GENERATING:
            generated = _GENERATED.setdefault(self._keys[name], {})
            for index in indices:
                if index not in generated:
                    generated[index] = self._datasets[name][index]
            return [generated[index] for index in indices]

    def tasks(self) -> list[Task]:
        return [Task(task_id=f"{name}:{index}", family=name,
                     question=f"{entry['question']}\n\n{ANSWER_FORMAT}", answer=str(entry["answer"]),
                     metadata={"index": index})
                for name, dataset in self._datasets.items()
                for index, entry in enumerate(self._entries(name, range(len(dataset))))]

    def reset(self, task: Task) -> EnvEpisode:
        [entry] = self._entries(task.family, [task.metadata["index"]])
        return ReasoningGymEpisode(task, self._datasets[task.family], entry)
