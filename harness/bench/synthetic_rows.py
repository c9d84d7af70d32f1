"""The rows of a synthetic job for `python -m harness.bench viewer`: its episodes and model calls drawn
once (`SyntheticJob`), and each table's columns from them: episodes, llm_calls, transcripts (about 1 KB
each, in words drawn at random), memory_events (a lesson stored and three recalled per episode), runs."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

PURPOSES = ("act", "distill", "embed", "safety", "validate")
FAMILIES = ("capital", "demonym", "currency", "language", "continent")
WORDS = np.array([
    "the", "a", "capital", "city", "country", "river", "answer", "lesson", "reply", "only", "name", "of",
    "is", "in", "on", "what", "which", "remember", "prefer", "check", "spelling", "official", "largest",
    "small",
])  # fmt: skip


@dataclass
class SyntheticJob:
    """One job's episodes and model calls, drawn once, that each of its tables is written from."""

    run_id: str
    job: int
    calls_per_episode: int
    start: dt.datetime
    positions: np.ndarray
    episode_ids: list[str]
    task_ids: list[str]
    questions: list[str]
    times: list[dt.datetime]
    success: np.ndarray
    prompt: np.ndarray
    """Prompt tokens per episode and call (episodes x calls_per_episode); completion likewise."""
    completion: np.ndarray
    call_episode: np.ndarray
    """The stream position of each call's episode, the calls of all episodes in one row."""
    call_ids: list[str]
    purposes: list[str]

    @property
    def episodes(self) -> int:
        return len(self.positions)

    @property
    def calls(self) -> int:
        return len(self.call_episode)


def draw_job(
    run_id: str, job: int, episodes: int, calls_per_episode: int, rng: np.random.Generator
) -> SyntheticJob:
    start = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    positions = np.arange(episodes)
    episode_ids = [f"{run_id}/{p}" for p in positions]
    task_ids = [f"{FAMILIES[p % 5]}:T{p:06d}" for p in positions]
    questions = [
        f"What is the {FAMILIES[p % 5]} of country {p}? Reply with the name only." for p in positions
    ]
    success = rng.random(episodes) < 0.6
    prompt = rng.integers(200, 900, (episodes, calls_per_episode))
    completion = rng.integers(1, 40, (episodes, calls_per_episode))
    n = episodes * calls_per_episode
    return SyntheticJob(
        run_id=run_id,
        job=job,
        calls_per_episode=calls_per_episode,
        start=start,
        positions=positions,
        episode_ids=episode_ids,
        task_ids=task_ids,
        questions=questions,
        times=[start + dt.timedelta(seconds=int(p)) for p in positions],
        success=success,
        prompt=prompt,
        completion=completion,
        call_episode=np.repeat(positions, calls_per_episode),
        call_ids=[f"{job:02x}{i:030x}" for i in range(n)],
        purposes=[PURPOSES[min(i % calls_per_episode, len(PURPOSES) - 1)] for i in range(n)],
    )


def episode_columns(drawn: SyntheticJob, rng: np.random.Generator) -> dict[str, Any]:
    episodes, positions, success = drawn.episodes, drawn.positions, drawn.success
    prompt, completion = drawn.prompt, drawn.completion
    calls_total = (prompt + completion).sum(axis=1)
    act_tokens = prompt[:, 0] + completion[:, 0]
    return {
        "episode_id": drawn.episode_ids,
        "run_id": [drawn.run_id] * episodes,
        "variant": ["memory"] * episodes,
        "seed": [drawn.job] * episodes,
        "env": ["countries"] * episodes,
        "family": [FAMILIES[p % 5] for p in positions],
        "scenario": ["sequential"] * episodes,
        "order_seed": [drawn.job] * episodes,
        "stream_position": positions,
        "probe": [False] * episodes,
        "attempted": [True] * episodes,
        "task_id": drawn.task_ids,
        "question": drawn.questions,
        "reference": [f"Answer {p}" for p in positions],
        "response": [
            f"Answer {p}" if s else "I am not sure." for p, s in zip(positions, success, strict=True)
        ],
        "success": success,
        "score": success.astype(float),
        "reward": success.astype(float),
        "attempts": [1] * episodes,
        "model": ["scripted/bench"] * episodes,
        "n_calls": [drawn.calls_per_episode] * episodes,
        "prompt_tokens": prompt.sum(axis=1),
        "completion_tokens": completion.sum(axis=1),
        "total_tokens": calls_total,
        "cost_usd": calls_total * 1e-7,
        "cache_read_tokens": [0] * episodes,
        "cache_write_tokens": [0] * episodes,
        "reasoning_tokens": [0] * episodes,
        "act_tokens": act_tokens,
        "act_cost_usd": act_tokens * 1e-7,
        "overhead_tokens": calls_total - act_tokens,
        "overhead_cost_usd": (calls_total - act_tokens) * 1e-7,
        "memory_size": positions + 1,
        "protocol": ["online"] * episodes,
        "latency_s": rng.random(episodes) * 2,
        "started_at": drawn.times,
        "finished_at": drawn.times,
    }


def call_identity(drawn: SyntheticJob) -> dict[str, Any]:
    """The columns llm_calls and transcripts share: which call of which episode, and why."""
    n = drawn.calls
    return {
        "call_id": drawn.call_ids,
        "run_id": [drawn.run_id] * n,
        "episode_id": [drawn.episode_ids[e] for e in drawn.call_episode],
        "task_id": [drawn.task_ids[e] for e in drawn.call_episode],
        "attempt": [1] * n,
        "purpose": drawn.purposes,
    }


def call_columns(drawn: SyntheticJob, rng: np.random.Generator) -> dict[str, Any]:
    n, per_episode = drawn.calls, drawn.calls_per_episode
    flat_prompt, flat_completion = drawn.prompt.reshape(-1), drawn.completion.reshape(-1)
    return {
        **call_identity(drawn),
        "model": ["scripted/bench"] * n,
        "prompt_tokens": flat_prompt,
        "completion_tokens": flat_completion,
        "total_tokens": flat_prompt + flat_completion,
        "cache_read_tokens": [0] * n,
        "cache_write_tokens": [0] * n,
        "reasoning_tokens": [0] * n,
        "usage_source": ["provider"] * n,
        "cost_usd": (flat_prompt + flat_completion) * 1e-7,
        "latency_s": rng.random(n),
        "queued_s": [0.0] * n,
        "retries": [0] * n,
        "cached": [False] * n,
        "run_in_flight": [1] * n,
        "started_at": [
            drawn.times[e] + dt.timedelta(milliseconds=i % per_episode * 10)
            for i, e in enumerate(drawn.call_episode)
        ],
    }


def transcript_columns(drawn: SyntheticJob, lessons: list[str]) -> dict[str, Any]:
    """Transcripts of about 1 KB each (a system prompt, three recalled lessons, the question), in words
    drawn at random so that they compress as text does, not as a repeated string would."""
    messages = [
        json.dumps(
            [
                {
                    "role": "system",
                    "content": "You are a concise assistant. Answer with the answer only. Lessons: "
                    + " | ".join(lessons[(i + k * 331) % 997] for k in range(3)),
                },
                {"role": "user", "content": drawn.questions[e]},
            ]
        )
        for i, e in enumerate(drawn.call_episode)
    ]
    return {
        **call_identity(drawn),
        "messages": messages,
        "reply": [
            None if p == "embed" else f"Answer {e}"
            for p, e in zip(drawn.purposes, drawn.call_episode, strict=True)
        ],
    }


def memory_event_columns(drawn: SyntheticJob, lessons: list[str]) -> dict[str, Any]:
    """A lesson stored per episode, and the (up to) three stored just before it recalled."""
    positions, task_ids = drawn.positions, drawn.task_ids
    memory_ids = [f"{drawn.job:02x}{p:010x}" for p in positions]
    recalled = [(p, max(0, p - k - 1)) for p in positions[1:] for k in range(min(3, p))]
    events = [(p, "insert", p) for p in positions] + [(p, "retrieve", source) for p, source in recalled]
    events.sort(key=lambda e: (e[0], e[1] == "insert"))
    return {
        "run_id": [drawn.run_id] * len(events),
        "episode_id": [drawn.episode_ids[p] for p, _, _ in events],
        "task_id": [task_ids[p] for p, _, _ in events],
        "stream_position": [p for p, _, _ in events],
        "event": [kind for _, kind, _ in events],
        "memory_id": [memory_ids[s] for _, _, s in events],
        "kind": ["lessons"] * len(events),
        "text": [lessons[s % 997] for _, _, s in events],
        "source_task_id": [task_ids[s] for _, _, s in events],
        "similarity": [None if kind == "insert" else 0.9 for _, kind, _ in events],
        "importance": [1.0] * len(events),
        "verified": [True] * len(events),
    }


def runs_columns(drawn: SyntheticJob) -> dict[str, Any]:
    job = drawn.job
    return {
        "run_id": [drawn.run_id],
        "variant": ["memory"],
        "env": ["countries"],
        "seed": [job],
        "order_seed": [job],
        "scenario": ["sequential"],
        "model": ["scripted/bench"],
        "job": [job],
        "overrides": [f"seed={job}"],
        "model_params": ["{}"],
        "settings": [json.dumps({"variant.name": "memory"})],
        "started_at": [drawn.start],
    }

