"""`numeric`: the number in the reply equal to the reference number, exactly or within a tolerance.

Which number: GSM8K's convention (Cobbe et al., 2021) is the number after the last "####"; models
that do not write one are scored, as lm-evaluation-harness's "flexible-extract" does, on the last
number of the reply (`last: true`), since a worked answer ends with its result. So: the text after
the last "####" (to the end of its line) if the reply has one, else the content of the last
`\\boxed{...}` if it has one, else the whole reply; in that text, the last (or with `last: false`,
the first) number. A marked answer holding no number fails rather than falling back, as
lm-evaluation-harness's strict match does.

What is a number: a sign (- + or the Unicode minus), a currency sign ($ € £ ¥ ₹) before or after
the sign, digits with optional comma thousands separators ("1,234,567"; a comma not followed by
exactly three digits separates two numbers, "3,4" is 3 and 4), an optional decimal part ("72.0",
".5"), an optional exponent ("1.5e-3", "1.5 × 10^{-3}", "1.5 \\times 10^3"); or a fraction of
integers ("3/4", "\\frac{3}{4}", "\\dfrac34"). What follows a number is ignored: units ("12 km",
"12km", "3rd") and "%" alike, so "45%" reads as 45 and matches a reference of 45 or "45%", never
0.45 (GSM8K's answers are written the way the question asks, so "what percent" has answer 45).
Digits glued to letters before them ("x2", "v1.2") are not numbers. Mixed numbers ("1 1/2") read as
two numbers.

Values are compared as decimals of 50 significant digits, not binary floats (so "72.0" equals "72",
"0.3" equals "3/10", and "0.1 + 0.2" rounding is no issue).

Options:
    tolerance: relative tolerance, as a fraction of the reference's magnitude (0.01: within 1%);
        default 0 (exact).
    abs_tolerance: absolute tolerance; default 0. A reply within either tolerance counts (as in
        Python's math.isclose).
    last: True (default): the last number of the answer text; False: the first.

The reference (and each alias) is a plain answer, "72", "1,234", "$1,200", "-0.5", "3/4", holding
exactly one number; anything else is refused before the run.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal, DecimalException

from envs.base import Task
from envs.scorers import Scorer, Verdict

_MANTISSA = r"(?:\d{1,3}(?:,\d{3}(?!\d))+|\d+)(?:\.\d+)?|\.\d+"
_EXPONENT = (r"[eE](?P<e1>[-+−]?\d+)"
             r"|\s*(?:×|x|\*|·|\\times|\\cdot)\s*10\s*\^\s*\{?\s*(?P<e2>[-+−]?\d+)\s*\}?")
_NUMBER = re.compile(
    # Not glued to a word or a decimal point before it: "x2" and the "2" of "1.2.3" are no numbers.
    r"(?<![A-Za-z0-9_.])"
    # A sign before the currency sign or after it ("-$5", "$-5"), not both.
    r"(?P<sign1>[-+−])?(?P<currency>[$€£¥₹])?(?(sign1)|(?P<sign2>[-+−])?)"
    r"(?:"
    r"\\[dt]?frac\s*(?:\{\s*(?P<fnum>\d+)\s*\}\s*\{\s*(?P<fden>\d+)\s*\}|(?P<fnum1>\d)(?P<fden1>\d))"
    r"|(?P<num>\d+)\s*/\s*(?P<den>\d+)(?![\d.])"
    rf"|(?P<mantissa>{_MANTISSA})(?:{_EXPONENT})?"
    r")"
)
_HASHES = re.compile(r"####([^\n]*)")
_CONTEXT = Context(prec=50, traps=[])
"""50 significant digits, no traps: a huge exponent becomes Infinity instead of an exception."""
_SHOWN = 200


def numbers(text: str) -> list[tuple[str, Decimal]]:
    """Every number in `text` as (its text, its value), in order; see the module docstring."""
    found = []
    for match in _NUMBER.finditer(text):
        groups = match.groupdict()
        negative = (groups["sign1"] or groups["sign2"] or "+") in "-−"
        numerator = groups["fnum"] or groups["fnum1"] or groups["num"]
        if numerator is not None:
            denominator = groups["fden"] or groups["fden1"] or groups["den"]
            if int(denominator) == 0:
                continue
            value = _CONTEXT.divide(Decimal(numerator), Decimal(denominator))
        else:
            mantissa = Decimal(groups["mantissa"].replace(",", ""))
            exponent = (groups["e1"] or groups["e2"] or "0").replace("−", "-")
            if len(exponent.lstrip("+-")) <= 6:
                value = mantissa.scaleb(int(exponent), _CONTEXT)
            else:  # beyond any decimal's range (and int()'s digit limit): overflow or underflow
                value = Decimal(0) if not mantissa or exponent.startswith("-") else Decimal("Infinity")
        found.append((match.group(0).strip(), value.copy_negate() if negative else value))
    return found


def answer_text(reply: str) -> tuple[str, str | None]:
    """The part of the reply that holds the answer, and the marker that delimited it, if any."""
    hashes = _HASHES.findall(reply)
    if hashes:
        return hashes[-1], "####"
    start = reply.rfind("\\boxed{")
    if start >= 0:
        depth, end = 0, len(reply)
        for index in range(start + len("\\boxed"), len(reply)):
            depth += {"{": 1, "}": -1}.get(reply[index], 0)
            if depth == 0:
                end = index
                break
        return reply[start + len("\\boxed{"): end], "\\boxed{}"
    return reply, None


class Numeric(Scorer):
    name = "numeric"

    def __init__(self, tolerance: float = 0.0, abs_tolerance: float = 0.0, last: bool = True) -> None:
        for option, value in (("tolerance", tolerance), ("abs_tolerance", abs_tolerance)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"scorer numeric: {option} must be a number >= 0, got {value!r}")
        self.tolerance = Decimal(str(tolerance))
        self.abs_tolerance = Decimal(str(abs_tolerance))
        self.last = last

    def _reference(self, form: str, task: Task) -> Decimal:
        found = numbers(form)
        if len(found) != 1:
            what = "no number" if not found else f"{len(found)} numbers"
            raise ValueError(f"task {task.task_id}: reference {form!r} holds {what}, not exactly one")
        return found[0][1]

    def check_reference(self, task: Task) -> None:
        for form in (task.answer, *task.aliases):
            self._reference(form, task)

    def _close(self, value: Decimal, reference: Decimal) -> bool:
        if value == reference:  # exact comparison, no rounding: the default
            return True
        if not (value.is_finite() and reference.is_finite()):
            return False
        # copy_abs and the module context, not abs(): the thread's context could round or trap.
        allowed = max(_CONTEXT.multiply(self.tolerance, reference.copy_abs()), self.abs_tolerance)
        return _CONTEXT.subtract(value, reference).copy_abs() <= allowed

    def score(self, reply: str, task: Task) -> Verdict:
        try:
            text, marker = answer_text(reply)
            found = numbers(text)
        except (DecimalException, TypeError, ValueError) as error:  # never raise on a reply
            return Verdict(score=0.0, success=False, response=None,
                           reason=f"unreadable reply ({type(error).__name__})")
        if not found:
            return Verdict(score=0.0, success=False, response=None,
                           reason=f"no number in the answer marked by {marker}" if marker
                           else "no number in the reply")
        shown, value = found[-1] if self.last else found[0]
        shown = shown if len(shown) <= _SHOWN else shown[: _SHOWN - 1] + "…"
        references = []
        for form in (task.answer, *task.aliases):
            try:
                references.append(self._reference(form, task))
            except ValueError:
                continue  # check_reference refuses these before a run; a score never raises
        if not references:
            return Verdict(score=0.0, success=False, response=shown,
                           reason="the reference holds no single number")
        if value in references:
            return Verdict(score=1.0, success=True, response=shown, reason="equals the reference")
        if any(self._close(value, reference) for reference in references):
            return Verdict(score=1.0, success=True, response=shown,
                           reason="within the tolerance of the reference")
        return Verdict(score=0.0, success=False, response=shown, reason="differs from the reference")
