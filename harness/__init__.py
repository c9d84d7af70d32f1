"""harness: a Ray-based parallel benchmark harness for self-evolving LLM agents.

Importing it sets the environment variables of HARNESS_ENV in this process's `os.environ` (each only
where the user has not set it): they must be in place before anything imports litellm or starts Ray,
and every Ray worker inherits them.

Its face (`__all__`): `agent_api`, the one module agents import; the commands (`python -m harness`,
`harness.report`, `harness.view`, `harness.evaluate`, `harness.bench`, `harness.warm`); `driver` and
`tables`, which Hydra's launcher and callbacks and a table of one's own reach; and `HARNESS_ENV`.
Each subpackage names its own face in its `__all__` in turn.
"""

import os

__all__ = ["HARNESS_ENV", "USER_SET", "__version__", "agent_api", "bench", "driver", "evaluate",
           "harness_env", "report", "tables", "view", "warm"]

# Set before anything imports litellm or starts Ray, so that every Ray worker inherits them:
# litellm would fetch its price list from the network at import; Ray 2.60 would turn on token
# auth for a local cluster; LanceDB would log at info level; Ray would deduplicate log lines.
HARNESS_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "RAY_AUTH_MODE": "disabled",
    "LANCEDB_LOG": "error",
    "LANCE_INCLUDE_VECTOR_CENTROIDS": "false",
    # Every job of a sweep prints its own summary; Ray must not fold identical lines together.
    "RAY_DEDUP_LOGS": "0",
    # Every run starts or joins its Ray explicitly (harness/driver/session.py): a call after the end of a
    # session must fail, not start a second Ray (a sweep's job thread would hang connecting to it).
    "RAY_ENABLE_AUTO_CONNECT": "0",
}
USER_SET = frozenset(name for name in HARNESS_ENV if name in os.environ)
"""The names of HARNESS_ENV the user set before the harness started: their values are the user's."""
for _name, _value in HARNESS_ENV.items():
    os.environ.setdefault(_name, _value)


def harness_env() -> dict[str, str]:
    """HARNESS_ENV as this process has it (a value the user set wins over the default)."""
    return {name: os.environ.get(name, value) for name, value in HARNESS_ENV.items()}

__version__ = "0.1.0"
