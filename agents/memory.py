"""Episodic memory: the baseline plus a memory of its own past tasks (see agents/memory_store.py).

Memory composes with any variant through its `memory` option (e.g. conf/variant/reflexion_memory.yaml);
this variant is the plain case, so its effect can be compared with the baseline's directly.
"""

from __future__ import annotations

from typing import Any

from agents.baseline import BaselineAgent
from harness.agent_api import AgentContext


class MemoryAgent(BaselineAgent):
    def __init__(self, context: AgentContext, memory: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if memory is None:
            raise ValueError("variant=memory needs a variant.memory section")
        super().__init__(context, memory=memory, **kwargs)
