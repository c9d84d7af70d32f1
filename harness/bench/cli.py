"""`python -m harness.bench [measurement]`: the bench's one command.

With no measurement named, sections 1 to 7 of the harness's own cost, one table each
(harness/bench/sections.py). With a name, that measurement alone, with flags of its own
(`python -m harness.bench <name> --help`):

- `sweep` (harness/bench/sweep.py): sweeps and one-job runs through the command line against a local
  HTTP model, section 7 alone with its sizes as flags;
- `versus` (harness/bench/versus.py): the harness and inspect_ai against the same local HTTP model;
- `endpoint` (harness/bench/endpoint_cost.py): an outside agent's call through the run's
  OpenAI-compatible endpoint against a native call, in CPU per call;
- `calibration` (harness/bench/calibration.py): the report's verdicts against an agent whose truth is
  known;
- `viewer` (harness/bench/viewer_speed.py): the viewer's pages and memory on a synthetic sweep of any
  size.
- `code` (harness/bench/code_scorer.py): the `code` scorer's time per task on HumanEval-style tests.
- `load` (harness/bench/load.py): commands (the harness's, inspect_ai's on the same HTTP model) timed
  quiet and beside N busy processes, side by side, with the ratio.
"""

from __future__ import annotations

import argparse
import sys

from harness.bench import calibration, code_scorer, endpoint_cost, load, sweep, versus, viewer_speed

MEASUREMENTS = {"sweep": sweep, "versus": versus, "endpoint": endpoint_cost, "calibration": calibration,
                "viewer": viewer_speed, "code": code_scorer, "load": load}
"""Each measurement's name and module; a module's `parser()` gives its flags, `main(argv)` runs it."""


def parser() -> argparse.ArgumentParser:
    """The flags of the run of sections 1 to 7; its usage lists every form, with each one's flags."""
    options = argparse.ArgumentParser(
        prog="python -m harness.bench",
        description="Measure the harness, not the model: with no measurement named, sections 1 to 7 "
        "(throughput, gateway overhead, memory retrieval, peak memory, the local model's tokens, a memory "
        "grown write by write, sweeps), one table each, in one run.",
        epilog="; ".join(f"python -m harness.bench {name}: {_summary(module)}"
                         for name, module in MEASUREMENTS.items()) + " (each --help says more).")
    options.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    options.add_argument("--skip-local-model", action="store_true", help="leave out section 5, which "
                         "starts the real local model (SmolLM2 on llama-cpp-python)")
    usage = (form.format_usage().removeprefix("usage: ").strip()
             for form in (options, *(module.parser() for module in MEASUREMENTS.values())))
    options.usage = "\n       ".join(usage)
    return options


def _summary(module: object) -> str:
    """What a measurement's docstring says it measures: its first sentence, after the command."""
    first = " ".join((module.__doc__ or "").split("\n\n")[0].split())
    return first.split(": ", 1)[-1].split(". ")[0].rstrip(".").replace("`", "")


def main(argv: list[str] | None = None) -> None:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] and given[0] in MEASUREMENTS:
        MEASUREMENTS[given[0]].main(given[1:])
        return
    args = parser().parse_args(given)
    # Imported here, deliberately: sections 1 to 6 import litellm, Ray and LanceDB (seconds each: about
    # 25 s on a busy 2-core machine), which no measurement named above needs.
    from harness.bench import sections

    sections.run(args.quick, args.skip_local_model)
