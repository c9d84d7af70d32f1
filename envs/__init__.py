"""Environments: one module per family, each configured by conf/env/<name>.yaml.

Each derives from `base` (`Environment`: tasks, episodes and their scores), and imports nothing of
the harness or the agents; a single-turn task is scored by a scorer of `scorers`; `tool_calls` are
the function calls between an agent and an environment whose actions are tool calls. `dataset`
reads its sources through `dataset_reading` and makes each row a task through `dataset_rows` (its
options checked by `dataset_options`, its cells rendered by `dataset_cells`): its own parts, off the
face. The face (`__all__`) is those and the environments.
"""

__all__ = ["base", "countries", "dataset", "jsonl", "reasoning_gym", "safety", "scienceworld", "scorers",
           "textworld", "tool_calls", "tools"]
