"""The versus bench runs both tools' real commands against one HTTP model and says so per row;
without inspect_ai it says how to install it and measures the harness alone."""

import pytest

from harness.bench import versus
from harness.bench.fake_chat import ServerProcess


@pytest.mark.slow
def test_without_inspect_ai_the_harness_is_measured_alone_and_the_install_is_named(monkeypatch, capsys,
                                                                                    tmp_path):
    monkeypatch.setattr(versus, "inspect_available", lambda: False)
    rows = versus.versus_section([2], calls=2, latency_s=0.05, keep=tmp_path)
    assert "pip install inspect-ai" in capsys.readouterr().out
    floor, first, row = rows
    # What any tool running its agents in Ray actors waits for: a fresh Ray, one actor, one request.
    assert floor["tool"] == "ray floor" and floor["ok"] == "yes" and floor["calls"] == 1, floor
    assert 0 < floor["first_call_s"] < floor["wall_s"], floor
    # A user's first command checks the model in full; the rows after it recall that check.
    assert first["tool"] == "harness (model check not kept)" and first["ok"] == "yes", first
    kept = (first["runs"], first["model_check_kept"], row["model_check_kept"])
    assert kept == (1, "no", "yes"), (first, row)
    log = (tmp_path / "harness-2.log").read_text()[-3000:]
    assert row["tool"] == "harness" and row["ok"] == "yes", (row, log)
    assert row["calls"] == row["expected"] == 4, row  # every call reached the server
    assert 0 < row["first_call_s"] < row["wall_s"] and row["cpu_ms_per_call"] > 0, row
    # What the command did after its last reply, and the CPU of its start-up apart from its calls'.
    assert 0 < row["exit_s"] < row["wall_s"] - row["first_call_s"], row
    assert row["startup_cpu_s"] > 0 and 0 < row["cpu_ms_per_call_after_start"] < row["cpu_ms_per_call"], row
    # Its start-up, stage by stage, from the command's manifest.json (startup_s): each stage after the
    # one before, all before the first call.
    stages = [row[f"{stage}_s"] for stage in ("composed", "ray", "pool", "checked")]
    assert 0 < stages[0] < stages[1] < stages[2] <= stages[3] < row["first_call_s"], row


@pytest.mark.slow
@pytest.mark.skipif(not versus.inspect_available(),
                    reason="inspect_ai is not installed (pip install -e '.[inspect]')")
def test_inspect_ai_reaches_the_same_model_with_the_same_calls(tmp_path):
    task_file = tmp_path / "versus_task.py"
    task_file.write_text(versus.INSPECT_TASK)
    with ServerProcess(0.05) as server:
        measured = versus.measure(versus.inspect_argv(server, 2, 3, 8, task_file, tmp_path / "logs"), server,
                                  tmp_path / "inspect.log", 600, env={"OPENAI_API_KEY": "no-key-needed"})
    assert measured.returncode == 0, measured.output
    assert measured.requests == 6 and measured.first_call_s is not None
