"""A command ends as soon as its work is done: its exit handlers run (Ray's shutdown, logging's flush),
and Python's final garbage collection, a second of a command's end, is skipped
(harness/driver/startup.py `end_without_collecting`; `python -m harness.bench versus` measures it)."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ENDING = textwrap.dedent("""
    import atexit, sys
    from harness.driver.startup import end_without_collecting
    atexit.register(print, "earlier handler ran", flush=True)  # registered before it, as logging's is
    if sys.argv[1] == "quick":
        end_without_collecting()
    atexit.register(print, "exit handler ran", flush=True)  # registered after it: runs before it

    class Cycle:
        def __del__(self):
            print("collected", flush=True)

    left = Cycle()
    left.me = left  # only a collection frees it
    del left
    print("printed last", end="")  # unflushed: the interpreter still flushes standard output
""")


def ended(how: str) -> str:
    done = subprocess.run([sys.executable, "-c", ENDING, how], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_exit_handlers_run_and_nothing_printed_is_lost_but_nothing_is_collected():
    assert ended("quick") == "printed lastexit handler ran\nearlier handler ran\n"


def test_without_it_python_collects_at_exit():
    assert ended("as python does") == "printed lastexit handler ran\nearlier handler ran\ncollected\n"


def test_the_harness_commands_end_so():
    for module in ("harness/__main__.py", "harness/evaluate.py"):
        source = (ROOT / module).read_text()
        main = source.split('if __name__ == "__main__":', 1)[1]
        assert "end_without_collecting()" in main, module
