"""The tables: what a row is, how it is written, and how it is read back.

`records` defines every table as a pydantic model (the Arrow schema derived from it); `writer` is
the one writer (append-only Parquet part files, compacted at close); `orphans` finds what a run has
finished and sets aside the rest (for a resume, harness/driver/resume.py); `reading` reads the
tables back (`read_table`, `read_tables`); `summary` sums them up per variant, seed and model;
`costs` is the one policy for dollars that may be unknown.
"""

__all__ = ["costs", "orphans", "reading", "records", "summary", "writer"]
