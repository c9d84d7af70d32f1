"""`python -m harness.bench [measurement]`: the harness measured side by side, never by timed tests.

One command (cli.py): with no measurement named, sections 1 to 7 of the harness's own cost
(sections.py, one module each: throughput.py, gateway_overhead.py, retrieval.py, local_model.py,
grown_memory.py, sweep.py); named, one measurement alone: `sweep`, `versus` (against inspect_ai),
`endpoint` (endpoint_cost.py: an outside agent's call through the run's endpoint), `calibration` (the
report's verdicts against a known truth), `viewer` (viewer_speed.py: the viewer at any size), `code`
(code_scorer.py: the `code` scorer's time per task). What they share: meter.py, the one process
meter; fake_chat.py, the HTTP model; commands.py, one command line measured whole;
memory_variant.py, variant=memory's memory built by its `_target_`; common.py, the config,
timestamps and the markdown table.
"""
