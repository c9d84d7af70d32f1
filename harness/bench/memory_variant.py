"""The episodic memory that sections 3 and 6 of `python -m harness.bench` measure, built as a run builds
it: the config composed with `variant=memory` and the bench's `variant.memory` options, the run planned
(`build_plan`) and its agent built by its `_target_` (`build_agent`, as a worker builds it) around a
model client of the bench's; the bench takes the agent's `memory`. The harness never imports agents/:
what the bench needs of the memory's module it reads from the memory itself (its table's schema, its
compaction cycle), and its table through its one public door to it (`lance_table`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.agent_api import ModelClient, Recorder
from harness.agent_run.assembly import build_agent
from harness.agent_run.plan import build_plan
from harness.bench.common import bench_settings


def build_memory(model: ModelClient, recorder: Recorder, workdir: Path, **options: Any) -> Any:
    """variant=memory's memory, with these `variant.memory` options (top_k, capacity, compact_every,
    ...) over the yaml's; its table lives in `workdir`/memory."""
    overrides = [f"variant.memory.{key}={value}" for key, value in options.items()]
    settings = bench_settings("variant=memory", "model=scripted", "embedder=hashing", "stream.num_tasks=1",
                              "seeds=[0]", *overrides)
    [spec] = build_plan(settings, workdir)
    memory = getattr(build_agent(spec, model, recorder), "memory", None)
    if memory is None:
        raise RuntimeError(f"variant=memory ({spec.variant_cfg['_target_']}) built an agent without a memory")
    return memory


async def table_schema(memory: Any, dim: int) -> pa.Schema:
    """The Arrow schema of the memory's table for `dim`-dim vectors (the table opened, empty, if it
    was not yet): what rows loaded into it must have."""
    return await (await memory.lance_table(dim)).schema()
