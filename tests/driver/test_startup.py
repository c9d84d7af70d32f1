"""`manifest.json` says where a command's start-up went, stage by stage."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_manifest_times_each_stage_of_the_start_up_from_the_commands_start(tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "harness", "model=scripted", "embedder=hashing",
                           "stream.num_tasks=2", "progress=false", "ray.include_dashboard=false",
                           f"hydra.run.dir={run_dir}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    stages = json.loads((run_dir / "manifest.json").read_text())["startup_s"]
    assert list(stages) == ["composed", "ray", "pool", "checked"]
    assert 0 < stages["composed"] < stages["ray"] < stages["pool"] <= stages["checked"]
