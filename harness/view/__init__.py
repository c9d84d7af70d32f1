"""`python -m harness.view`: a local web app over the tables of runs and sweeps, live while they run.

`app` serves it (its `main` is the command); `store` finds the run directories and reads their rows
(with `part_chunks` merging a running job's part files); `queries` says what each page shows, as
plain rows, `learnt_queries` those of the learnt page; `pages` and `learnt` render them as HTML;
`selection_report` shows the report's own comparison for any selection of runs. Its face
(`__all__`) is the command's module alone: nothing else imports the viewer.
"""

__all__ = ["app"]
