"""One agent run: from settings to the stream an agent works through, and the loop that runs it.

`plan` turns validated settings into agent runs (`AgentRunSpec`, in `spec`, with the ids of the
episodes each writes), in steps, one module each: `tasks` builds the env's pool (the tuning split held
out) and fills the settings that depend on it, `identity` names the runs and reads what the variant's
agent needs, `streams` draws, orders and shows each run's tasks, and `snapshots` finds the one a run
starts from; `components` makes the components a config names (by `_target_: ...`) into objects;
`assembly` builds the agent with the harness pieces composed around it (the LLM judge of
`reference_free_judge`, the sealed `gate`, the check of `safety_check`); `runner` is the loop: for
each task, reset, solve, score, learn, write the rows; `checks` lends a scorer that settles after the
step the run's model and the sandbox; `endpoint` is the run's OpenAI-compatible endpoint for outside
agents; `snapshots` keep what a run has learnt and start a run from one. Agents meet it only through
`harness.agent_api`; the driver, the bench and `harness.evaluate` use the modules of `__all__`.
"""

__all__ = ["assembly", "checks", "components", "endpoint", "plan", "runner", "spec", "streams", "tasks"]
