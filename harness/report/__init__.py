"""`python -m harness.report`: variants compared at equal spend, as report.md and report.html.

`build` reads the tables of every run below the given paths and writes the report (its `main` is
the command); `compare` makes the paired comparisons and self-evolution metrics, on the statistics
of `stats` (`sequential`: verdicts valid at every look, for sweeps that add seeds; `aggregate`:
across environments, as rliable does); `parts` is a section as both pages see it, rendered to HTML
by `html`. Its face (`__all__`) is what the viewer, the sweep that adds seeds and the bench use.
"""

__all__ = ["build", "compare", "html", "parts", "sequential", "stats"]
