"""`python -m harness.report`: variants compared at equal spend, as report.md and report.html.

`build` is the command (its `main`): it reads the tables of every run below the given paths
(`loading`), computes each group's numbers (`grouped`: success with its interval, spend, accuracy at
matched spend, the paired comparisons), puts them in sections (`comparison_sections`: the variants
compared; `mechanism_sections`: what the agents did) and writes report.md with its plots (`plots`),
comparisons.parquet and report.html. `compare` makes the paired comparisons and self-evolution
metrics, on the statistics of `stats` (`sequential`: verdicts valid at every look, for sweeps that add
seeds; `aggregate`: across environments, as rliable does); `parts` is a section as both pages see it,
rendered to HTML by `html`. Its face (`__all__`) is what the viewer, the sweep that adds seeds and the
bench use.
"""

__all__ = ["build", "compare", "comparison_sections", "grouped", "html", "loading", "parts", "sequential",
           "stats"]
