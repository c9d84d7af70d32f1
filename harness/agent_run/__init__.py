"""One agent run: from settings to the stream an agent works through, and the loop that runs it.

`plan` turns validated settings into agent runs (`AgentRunSpec`), with their tasks chosen and
ordered by `streams`; `assembly` builds the agent with the harness pieces composed around it (the
LLM judge of `judge`, the sealed `gate`, the `safety` check); `runner` is the loop: for each task,
reset, solve, score, learn, write the rows; `snapshots` keep what a run has learnt and start a run
from one. Agents meet it only through `harness.agent_api`.
"""
