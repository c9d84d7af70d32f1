"""Agent variants: one module per variant, each configured by conf/variant/<name>.yaml.

Each derives from `base` (`BaseAgent`: attempts, the acting loop, memory, what a snapshot keeps) and
meets the harness only through `harness.agent_api`; the harness builds each by its yaml's
`_target_: ...`, never by import. The face (`__all__`) is `base` and the variants; the rest are
pieces the variants share: `acting` (the acting loop), `memory_store` and `vectors` (a run's own
memory), `weights` (what the weight learners share), `outside_handles` and `outside_transports`
(how `external` hosts an outside agent).
"""

__all__ = ["base", "baseline", "best_of_k", "cheatsheet", "dpo", "external", "gepa", "memory", "opro",
           "playbook", "reasoning_bank", "reflexion", "retry", "self_refine", "sft", "skills",
           "tool_learning"]
