"""`python -m harness.bench [measurement]`: the harness measured side by side, never by timed tests.

One command (cli.py): with no measurement named, sections 1 to 7 of the harness's own cost
(sections.py, one module each: throughput.py, gateway_overhead.py, retrieval.py, local_model.py,
grown_memory.py, sweep.py); named (`python -m harness.bench NAME`), one measurement alone: sweep,
versus (versus.py, against inspect_ai), endpoint (endpoint_cost.py: an outside agent's call through
the run's endpoint), calibration (calibration.py: the report's verdicts against a known truth),
viewer (viewer_speed.py: the viewer at any size, on a sweep that synthetic_sweep.py writes from the
rows synthetic_rows.py draws), code (code_scorer.py: the code scorer's time per task), load (load.py:
commands timed quiet and beside busy processes). What they share: meter.py, the one process meter;
fake_chat.py, the HTTP model; commands.py, one command line measured whole; memory_variant.py,
variant=memory's memory built by its `_target_: ...`; common.py, the config, timestamps and the
markdown table. Its face (`__all__`) is the command's module: nothing else imports the bench.
"""

__all__ = ["cli"]
