"""`math`: the reply's final answer mathematically equivalent to the reference, by math-verify
(Hugging Face's Math-Verify 0.9.0, `parse` then `verify`), as MATH-500 and AIME are scored by
lighteval and open-r1: "\\frac{1}{2}", "\\dfrac12", "0.5" and "1/2" are one answer, as are
"\\sqrt{2}/2" and "\\frac{1}{\\sqrt 2}", "(-\\infty, 3]" written either way, tuples, sets ("\\{3,2,1\\}"
is "\\{1,2,3\\}"), equations ("x = 2" is 2) and "10\\%" beside 10.

The reply: math-verify's extraction with lighteval's settings for predictions,
`LatexExtractionConfig(boxed_match_priority=0)` (a `\\boxed{...}` answer first, as the MATH paper,
Hendrycks et al. 2021, asks models to box the final answer) then `ExprExtractionConfig()` (a plain
"The final answer is 1/2", or the last number). Where the reply has several boxes, only the last is
read, as MATH's grader (`last_boxed_only_string`) reads it; math-verify alone would read
"\\boxed{5}, no: \\boxed{72}" as the set {5, 72}. A reply that is one short line with no math
delimiters ("\\left( 3, \\frac{\\pi}{2} \\right)", "2, 3", as a model told to give the answer only
writes it) is also read as the reference is, and either reading may match: math-verify's extraction
needs `$...$` around LaTeX and would take the 3 out of both.

The last box is read whole or not at all: its braces are matched over the whole reply (escaped
ones, `\\{`, skipped), however far from the end it is, and math-verify is given that box alone.
A box that is not closed within 20,000 characters, or whose braces nest more than 50 deep, is
refused with that reason, never judged by a fragment: math-verify 0.9.0 itself misreads
deep nesting (measured: a box of 108 nested `\\frac{1}{...}` around 2, worth 2, read as 1/2; 104
read right). A reply with no box is read from its last 20,000 characters, cut at a line break (or
a space) so that no line is read in part, since math-verify's patterns are slow on megabytes; one
with neither in those characters is refused.

The reference (and each alias) is a bare answer as MATH and AIME datasets hold it ("\\frac{1}{2}",
"[0, \\infty)", "204"): it is read as LaTeX (`$...$`), then as a boxed answer, then as a plain
expression; a reference none of these turns into a mathematical object is refused before the run.

Timeouts: math-verify's own timeouts use SIGALRM, which works only in a process's main thread, and
the harness scores in worker threads and Ray actors; with them off (`parsing_timeout=None`,
`timeout_seconds=None`, its documented switch for threads) a hostile reply such as
"\\boxed{9^{9^{9^{9}}}}" computes for ever (measured: still running after 5 minutes). So parsing and
verifying run in a helper process (one per scorer, started on first use, about a second), in its
main thread, under an alarm of `timeout` seconds; if that alarm cannot interrupt it (a long C
call), the scorer kills the process after twice the timeout and starts another on the next reply.
Either way the verdict is a failure "timed out". The helper's address space is capped at 4 GiB,
so a huge power fails as out of memory instead of swapping. One scorer's replies are verified one at
a time (math-verify holds the GIL anyway).

Options:
    timeout: seconds for reading and verifying one reply (or checking one reference); default 5,
        math-verify's own default.
    float_rounding: decimal places numbers are rounded to before comparing; default 6 (math-verify's
        and lighteval's).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from envs.base import Task
from envs.scorers import Scorer, Verdict

_READ_CHARS = 20_000
_MAX_DEPTH = 50
"""Braces nested inside a box, at most (a MATH answer nests a handful)."""
_BOX = re.compile(r"\\boxed(?![A-Za-z])")
_BRACE = re.compile(r"\\.|[{}]", re.DOTALL)
_TOKEN = re.compile(r"[^\s$]+")
_BARE_CHARS = 300
_MEMORY_LIMIT = 4 << 30
_START_TIMEOUT = 120.0
"""Seconds for the helper to import sympy and math-verify (a cold disk on a busy machine)."""
_SHOWN = 200


def _one_line(text: str, limit: int = _SHOWN) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Helper:
    """The helper process: one JSON request per line in, one JSON answer per line out."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.owner = 0
        self.lock = threading.Lock()

    def _stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    stream.close()
        self.process = None

    def _read_line(self, deadline: float) -> bytes | None:
        """One line from the helper by `deadline`; None where it is late or gone."""
        assert self.process is not None and self.process.stdout is not None
        descriptor = self.process.stdout.fileno()
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(descriptor, selectors.EVENT_READ)
            while b"\n" not in buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    return None
                chunk = os.read(descriptor, 1 << 16)
                if not chunk:
                    return None
                buffer += chunk
        return buffer

    def _start(self) -> str | None:
        """Start the helper; the reason it could not, or None."""
        # The child must import this module as the parent does, wherever the harness runs from.
        path = os.pathsep.join(p for p in [*sys.path, os.environ.get("PYTHONPATH", "")] if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from envs.scorers.math import serve; serve()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path},
                # Its own session: a Ctrl-C meant for the run does not kill it mid-answer; it still
                # ends with the run, on the end of its input.
                start_new_session=True)
        except OSError as error:
            return f"cannot start the math-verify helper ({_one_line(error)})"
        self.owner = os.getpid()
        if self._read_line(time.monotonic() + _START_TIMEOUT) != b"ready\n":
            self._stop()
            return "the math-verify helper did not start"
        return None

    def ask(self, request: dict[str, Any], limit: float) -> dict[str, Any]:
        """The helper's answer, or {"error": one line} (the helper is then restarted next time)."""
        with self.lock:
            # A forked copy of the harness must not share the parent's pipes.
            if self.owner != os.getpid() or self.process is None or self.process.poll() is not None:
                if self.owner == os.getpid():
                    self._stop()
                self.process = None
                failure = self._start()
                if failure:
                    return {"error": failure}
            assert self.process is not None and self.process.stdin is not None
            try:
                self.process.stdin.write(json.dumps(request).encode() + b"\n")
                self.process.stdin.flush()
            except OSError:
                self._stop()
                return {"error": "the math-verify helper exited"}
            line = self._read_line(time.monotonic() + limit)
            if line is None:
                gone = self.process.poll() is not None
                self._stop()
                return {"error": "the math-verify helper exited" if gone else "timed out"}
            try:
                answer = json.loads(line)
            except ValueError:
                answer = None
            if not isinstance(answer, dict):
                self._stop()  # out of step with its requests: start afresh
                return {"error": "the math-verify helper answered garbage"}
            return answer

    def close(self) -> None:
        with self.lock:
            if self.owner == os.getpid():
                self._stop()


def last_box(reply: str) -> tuple[str | None, str | None]:
    """The reply's last `\\boxed{...}`, whole, or why it cannot be read whole: (box, None),
    (None, reason), or (None, None) where the reply has no box. `\\boxed 5.` (MATH's unbraced form)
    is read as `\\boxed{5}`."""
    starts = [match.end() for match in _BOX.finditer(reply)]
    if not starts:
        return None, None
    start = len(reply) - len(reply[starts[-1]:].lstrip())
    if not reply.startswith("{", start):  # to the next space or $, less a closing full stop or comma
        token = _TOKEN.match(reply, start)
        answer = token.group().rstrip(".,;:") if token else ""
        return (f"\\boxed{{{answer}}}", None) if answer else (None, "the last \\boxed holds no answer")
    depth = 0
    for brace in _BRACE.finditer(reply, start, start + _READ_CHARS + 2):
        depth += {"{": 1, "}": -1}.get(brace.group(), 0)
        if depth > _MAX_DEPTH + 1:
            return None, f"the last \\boxed{{...}} nests braces more than {_MAX_DEPTH} deep: not read"
        if depth == 0:
            return f"\\boxed{{{reply[start + 1: brace.start()]}}}", None
    return None, f"the last \\boxed{{ is not closed within {_READ_CHARS:,} characters: not read"


def answer_text(reply: str) -> tuple[str | None, str | None]:
    """What math-verify is given of the reply (its last box whole, else its last 20,000 characters
    from a line break or space on), or None and why the reply is not read."""
    box, refusal = last_box(reply)
    if box is not None or refusal is not None:
        return box, refusal
    if len(reply) <= _READ_CHARS:
        return reply, None
    tail = reply[-_READ_CHARS:]
    cut = next((index for index in (tail.find("\n"), tail.find(" ")) if index >= 0), -1)
    if cut < 0:
        return None, f"no line break or space in the reply's last {_READ_CHARS:,} characters: not read"
    return tail[cut + 1:], None


class Math(Scorer):
    name = "math"
    packages = ("math-verify",)
    blocking = True  # a helper process, up to 2 x timeout per reply

    def __init__(self, timeout: float = 5.0, float_rounding: int = 6) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"scorer math: timeout must be a number of seconds > 0, got {timeout!r}")
        if isinstance(float_rounding, bool) or not isinstance(float_rounding, int) or float_rounding < 0:
            raise ValueError(f"scorer math: float_rounding must be an integer >= 0, got {float_rounding!r}")
        if importlib.util.find_spec("math_verify") is None:
            raise ValueError('scorer math needs the math extra: pip install "harness[math]"')
        self.timeout = float(timeout)
        self.float_rounding = float_rounding
        self._helper = _Helper()

    def __getstate__(self) -> dict[str, Any]:
        # A process and a lock do not pickle (Ray ships environments to its workers).
        return {key: value for key, value in self.__dict__.items() if key != "_helper"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._helper = _Helper()

    def __del__(self) -> None:
        helper = self.__dict__.get("_helper")
        try:
            if helper is not None:
                helper.close()
        except Exception:  # at interpreter exit; the helper ends anyway when its input closes
            pass

    def _ask(self, forms: list[str], reply: str | None) -> dict[str, Any]:
        request = {"forms": forms, "reply": reply, "timeout": self.timeout,
                   "float_rounding": self.float_rounding}
        # The helper's alarm comes first; twice the time is for a C call the alarm cannot interrupt.
        return self._helper.ask(request, limit=2 * self.timeout + 1)

    def check_reference(self, task: Task) -> None:
        answer = self._ask([task.answer, *task.aliases], None)
        if "error" in answer:
            raise ValueError(f"task {task.task_id}: math-verify could not read the reference "
                             f"{task.answer!r}: {answer['error']}")
        for form in answer["unreadable"]:
            raise ValueError(f"task {task.task_id}: math-verify cannot parse the reference {form!r}")

    def score(self, reply: str, task: Task) -> Verdict:
        try:
            # json.dumps escapes lone surrogates and control characters: any str travels.
            # The last box only, as MATH's own grader (last_boxed_only_string) reads it: math-verify
            # would read "\boxed{5}, no: \boxed{72}" as the set {5, 72}.
            text, refusal = answer_text(reply)
            if refusal is not None:
                return Verdict(score=0.0, success=False, response=None, reason=refusal)
            answer = self._ask([task.answer, *task.aliases], text)
        except Exception as error:  # not text at all, or a broken answer line: never raise on a reply
            return Verdict(score=0.0, success=False, response=None,
                           reason=f"unreadable reply ({type(error).__name__})")
        if "error" in answer:
            reason = (f"timed out after {self.timeout:g} s (math-verify)" if answer["error"] == "timed out"
                      else _one_line(answer["error"]))
            return Verdict(score=0.0, success=False, response=None, reason=reason)
        response = _one_line(answer["response"]) if answer["response"] else None
        if answer["equivalent"]:
            return Verdict(score=1.0, success=True, response=response,
                           reason="equivalent to the reference (math-verify)")
        if response is None:
            return Verdict(score=0.0, success=False, response=None,
                           reason="no math answer in the reply" if reply.strip() else "empty reply")
        if not answer["parsed"]:
            return Verdict(score=0.0, success=False, response=response,
                           reason="math-verify cannot parse the answer")
        if answer["no_reference"]:
            return Verdict(score=0.0, success=False, response=response,
                           reason="math-verify cannot parse the reference")
        return Verdict(score=0.0, success=False, response=response,
                       reason="not equivalent to the reference (math-verify)")


# The helper's side. Everything below runs in the helper process only.

def serve() -> None:
    """The helper's loop: read requests from stdin, answer on stdout, until stdin closes."""
    import logging
    import resource

    # The protocol gets a private copy of stdout; whatever a library prints goes to stderr (discarded)
    # instead of into an answer line.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    from math_verify.errors import TimeoutException

    with contextlib.suppress(ValueError, OSError):  # a lower hard limit already: keep it
        resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT, _MEMORY_LIMIT))
    # math-verify warns that its timeouts are off, and logs each failed parse: the parent reports.
    logging.disable(logging.CRITICAL)
    checker = _Checker()

    def on_alarm(*_: Any) -> None:
        checker.timed_out = True
        # math-verify catches its own TimeoutException (a BaseException) around each parse and each
        # comparison and gives up on it; the flag tells this loop the answer is a timeout.
        raise TimeoutException("timed out")

    signal.signal(signal.SIGALRM, on_alarm)
    print("ready", file=protocol, flush=True)
    for line in sys.stdin:
        checker.timed_out = False
        try:
            request = json.loads(line)
            signal.setitimer(signal.ITIMER_REAL, request["timeout"])
            answer = checker.handle(request)
        except TimeoutException:
            answer = {"error": "timed out"}
        except Exception as error:
            answer = {"error": f"math-verify failed ({type(error).__name__})"}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if checker.timed_out:
            answer = {"error": "timed out"}
        print(json.dumps(answer), file=protocol, flush=True)


class _Checker:
    """math-verify's reading and comparison, in the helper process; references parsed once."""

    def __init__(self) -> None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig

        self.reply_config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
        self.reference_config = [LatexExtractionConfig(), ExprExtractionConfig()]
        self.references: dict[str, list[Any]] = {}
        self.timed_out = False

    @staticmethod
    def bare(reply: str) -> bool:
        # One short line with no math delimiters: math-verify's extraction wants `$...$` around LaTeX
        # and takes a plain number out of the rest (the 3 of \left( 3, \frac{\pi}{2} \right), of 2, 3).
        return ("\n" not in reply.strip() and len(reply) <= _BARE_CHARS
                and not any(mark in reply for mark in ("$", "\\(", "\\[", "\\boxed")))

    @staticmethod
    def mathematical(parsed: list[Any]) -> bool:
        return any(not isinstance(item, str) for item in parsed)

    def reference(self, form: str) -> list[Any]:
        from math_verify import parse

        if form not in self.references:
            parsed: list[Any] = []
            for text in (f"${form}$", f"\\boxed{{{form}}}", form):
                parsed = parse(text, self.reference_config, parsing_timeout=None)
                if self.mathematical(parsed):
                    break
            if self.timed_out:  # math-verify gave up on it: say timed out, and try again next time
                return []
            self.references[form] = parsed if self.mathematical(parsed) else []
        return self.references[form]

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        from math_verify import parse, verify

        golds = [self.reference(form) for form in request["forms"]]
        if request["reply"] is None:
            forms = zip(request["forms"], golds, strict=True)
            return {"unreadable": [form for form, gold in forms if not gold]}
        reply = request["reply"]
        readings = [parse(reply, self.reply_config, fallback_mode="first_match", parsing_timeout=None)]
        if self.bare(reply):  # also read as the reference is; either reading may match
            readings.insert(0, parse(f"${reply.strip()}$", self.reference_config, fallback_mode="first_match",
                                     parsing_timeout=None))
        rounding = request["float_rounding"]
        for predicted in readings:
            equivalent = any(verify(gold, predicted, float_rounding=rounding, timeout_seconds=None)
                             for gold in golds if gold and predicted)
            if equivalent:
                break
        else:  # no match: report the extraction's reading, or the bare one where it found nothing
            predicted = next((reading for reading in readings[::-1] if reading), readings[-1])
        text = next((item for item in predicted if isinstance(item, str)), None)
        return {"equivalent": equivalent, "response": text, "parsed": self.mathematical(predicted),
                "no_reference": not any(golds)}
