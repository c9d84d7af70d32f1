"""`python -m harness.bench endpoint` runs and prints what it claims (the speed is for the bench to print)."""

from harness.bench.cli import main

SIDES = ["native", "endpoint", "endpoint, stream", "endpoint, async"]


def test_the_endpoint_bench_prints_cpu_per_call_of_each_side_against_native(capsys):
    main(["endpoint", "--calls", "3", "--rounds", "2"])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
            for line in lines[1:]]
    assert [row["side"] for row in rows] == SIDES
    assert all(row["calls x rounds"] == "3 x 2" for row in rows)
    for row in rows:
        assert float(row["CPU ms per call"]) > 0 and float(row["wall ms per call"]) > 0, row
        assert float(row["loop thread ms"]) > 0, row
    for row in rows[1:3]:  # the sync client in a thread of its own: both shares are there
        assert float(row["client thread ms"]) > 0 and row["endpoint side more ms"], row
    assert rows[3]["client thread ms"] == rows[3]["endpoint side more ms"] == ""  # async: one thread
    assert float(rows[0]["/ native"]) == 1
    verdicts = out.split("target: <= 2 ms more CPU per call than a native call\n")[1].splitlines()
    assert [line.split(" (")[0] for line in verdicts[:3]] == SIDES[1:]
    assert all(line.endswith("met)") for line in verdicts[:3])
