"""The scorers of envs/scorers/, each by a table of hand-made replies (the hard ones included: numbers
with separators and units, equivalent LaTeX, letters in many wrappings, reordered SQL rows), the
references each refuses, and hostile replies that must give a failed verdict, never an exception.
Every verdict's reason is one line. SQLite databases are built in tmp_path."""

from __future__ import annotations

import json
import pickle
import random
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from envs.base import Task
from envs.scorers import Scorer, Verdict, scorer, scorer_class

ROOT = Path(__file__).resolve().parents[2]
NAMES = {name: f"envs.scorers.{name}" for name in ("includes", "regex", "numeric", "math", "choice", "sql")}


def task(answer: str, *aliases: str, task_id: str = "t1", **metadata: Any) -> Task:
    return Task(task_id=task_id, family="f", question="q?", answer=answer, aliases=aliases, metadata=metadata)


def judged(verdict: Verdict) -> Verdict:
    """The checks every verdict passes: a score in [0, 1] that agrees with success, a one-line reason."""
    assert isinstance(verdict, Verdict)
    assert verdict.reason and "\n" not in verdict.reason and "\r" not in verdict.reason, verdict.reason
    assert len(verdict.reason) <= 300
    assert verdict.score == (1.0 if verdict.success else 0.0)
    return verdict


@pytest.fixture(scope="module")
def math_scorer():
    found = scorer("math")
    yield found
    found._helper.close()


# ---------------------------------------------------------------------------------------- includes

INCLUDES = [
    ("plain", {}, task("Paris"), "I believe it is Paris.", True),
    ("case-accents-punctuation", {}, task("São Tomé"), "The capital is SAO-TOME!", True),
    ("alias", {}, task("United States", "USA"), "usa, obviously", True),
    ("multiword", {}, task("New York"), "She lives in new york city.", True),
    ("hedging-counts", {}, task("Paris"), "Paris or Lyon", True),
    ("word-boundary", {}, task("Paris"), "Parisian food", False),
    ("absent", {}, task("Paris"), "Lyon", False),
    ("empty", {}, task("Paris"), "", False),
    ("cjk-needs-no-boundaries", {"word_boundaries": False}, task("北京"), "答案是北京。", True),
    ("cjk-with-boundaries", {}, task("北京"), "答案是北京。", False),
]


@pytest.mark.parametrize("options,the_task,reply,success", [c[1:] for c in INCLUDES],
                         ids=[c[0] for c in INCLUDES])
def test_includes(options, the_task, reply, success):
    verdict = judged(scorer({"name": "includes", **options}).score(reply, the_task))
    assert verdict.success is success, verdict


# ------------------------------------------------------------------------------------------- regex

REGEX = [
    ("answer-group", {"pattern": r"Answer:\s*(?P<answer>.+)"}, task("Lima"), "Answer: lima.", True),
    ("whole-match", {"pattern": r"\d+"}, task("42"), "it is 42", True),
    ("last-match-by-default", {"pattern": r"answer is (?P<answer>\w+)"}, task("cold"),
     "the answer is hot... no, the answer is cold", True),
    ("first-match", {"pattern": r"answer is (?P<answer>\w+)", "last": False}, task("cold"),
     "the answer is hot... no, the answer is cold", False),
    ("flag-i", {"pattern": r"ANSWER: (?P<answer>\w+)", "flags": "i"}, task("cold"), "answer: Cold", True),
    ("no-flag-no-match", {"pattern": r"ANSWER: (?P<answer>\w+)"}, task("cold"), "answer: Cold", False),
    ("flag-m", {"pattern": r"^(?P<answer>\w+)$", "flags": "m"}, task("mice"), "Thinking.\nmice\n", True),
    ("alias", {"pattern": r"is (?P<answer>[\w ]+)"}, task("United States", "USA"), "It is USA", True),
    ("differs", {"pattern": r"is (?P<answer>\w+)"}, task("cold"), "It is hot", False),
    ("answer-group-unmatched", {"pattern": r"is (?P<answer>\d+)|nothing"}, task("3"), "nothing", False),
]


@pytest.mark.parametrize("options,the_task,reply,success", [c[1:] for c in REGEX], ids=[c[0] for c in REGEX])
def test_regex(options, the_task, reply, success):
    verdict = judged(scorer({"name": "regex", **options}).score(reply, the_task))
    assert verdict.success is success, verdict


def test_a_pattern_that_backtracks_without_end_on_a_reply_fails_that_reply_within_its_time_limit():
    """`(x+x+)+y` on 5,000 x's: Python's `re` would run for longer than the universe has."""
    verdict = judged(scorer({"name": "regex", "pattern": r"(x+x+)+y"}).score("x" * 5000, task("y")))
    assert verdict.reason == "the pattern took over 1 s on the reply (it backtracks without end: simplify it)"


# ----------------------------------------------------------------------------------------- numeric

NUMERIC = [
    ("thousands", {}, "1234567", "The total is 1,234,567 apples.", True),
    ("decimal-zero-reply", {}, "72", "72.0", True),
    ("decimal-zero-reference", {}, "72.0", "So 72", True),
    ("currency", {}, "1200", "It costs $1,200.", True),
    ("currency-reference", {}, "$1,200", "1200 dollars", True),
    ("comma-reference", {}, "1,234", "1234", True),
    ("unit-spaced", {}, "12", "12 km", True),
    ("unit-glued", {}, "12", "about 12km away", True),
    ("percent-is-the-number", {}, "45", "45%", True),
    ("percent-is-not-a-fraction", {}, "0.45", "45%", False),
    ("fraction", {}, "0.75", "3/4", True),
    ("latex-fraction", {}, "3/4", "\\frac{3}{4}", True),
    ("dfrac-short", {}, "0.5", "\\dfrac12", True),
    ("scientific-e", {}, "1500", "1.5e3", True),
    ("scientific-times", {}, "0.0015", "1.5 \\times 10^{-3}", True),
    ("negative", {}, "-5", "The temperature is -5 degrees.", True),
    ("unicode-minus", {}, "-5", "−5 °C", True),
    ("negative-currency", {}, "-5", "a loss of -$5", True),
    ("sign-matters", {}, "-5", "5", False),
    ("subtraction-is-no-sign", {}, "3", "5-3", True),
    ("last-number", {}, "8", "First 3 then 5, so 8", True),
    ("first-number", {"last": False}, "8", "First 3 then 5, so 8", False),
    ("gsm8k-hashes", {}, "72", "Work: 70 + 2\n#### 72\nChecked in 3 steps.", True),
    ("boxed", {}, "72", "So \\boxed{72} (took 3 s)", True),
    ("marked-but-no-number", {}, "72", "7 * 10 + 2\n#### seventy-two", False),
    ("glued-to-letters", {}, "5", "x2 = 5", True),
    ("no-number", {}, "5", "I don't know", False),
    ("exact-by-default", {}, "3.14159", "3.14", False),
    ("relative-tolerance", {"tolerance": 0.001}, "3.14159", "3.14", True),
    ("relative-tolerance-too-far", {"tolerance": 0.0001}, "3.14159", "3.14", False),
    ("absolute-tolerance", {"abs_tolerance": 0.01}, "3.14159", "3.14", True),
    ("huge-exponent", {}, "5", "1e99999999999999999999", False),
]


@pytest.mark.parametrize("options,reference,reply,success", [c[1:] for c in NUMERIC],
                         ids=[c[0] for c in NUMERIC])
def test_numeric(options, reference, reply, success):
    the_scorer = scorer({"name": "numeric", **options})
    the_task = task(reference)
    the_scorer.check_reference(the_task)
    verdict = judged(the_scorer.score(reply, the_task))
    assert verdict.success is success, verdict


def test_numeric_alias_and_response():
    verdict = judged(scorer("numeric").score("I got $1,200 in total", task("1000", "1200")))
    assert verdict.success and verdict.response == "$1,200"


# -------------------------------------------------------------------------------------------- math

HALF = "\\frac{1}{2}"
MATH = [
    ("boxed-frac", HALF, "Hence \\boxed{\\frac{1}{2}}.", True),
    ("boxed-dfrac-short", HALF, "So \\boxed{\\dfrac12}", True),
    ("boxed-decimal", HALF, "\\boxed{0.5}", True),
    ("boxed-slash", HALF, "\\boxed{1/2}", True),
    ("plain-final-answer", HALF, "The final answer is 0.5", True),
    ("inline-latex", HALF, "It is $\\frac12$", True),
    ("decimal-reference", "0.5", "\\boxed{\\frac{1}{2}}", True),
    ("wrong-fraction", HALF, "\\boxed{\\frac{1}{3}}", False),
    ("last-boxed-wins", "72", "First \\boxed{5}, then corrected: \\boxed{72}", True),
    ("integer-decimal", "72", "\\boxed{72.0}", True),
    ("thousands", "1234", "\\boxed{1,234}", True),
    ("interval", "[0, \\infty)", "\\boxed{[0,\\infty)}", True),
    ("interval-open-is-not-closed", "[0, \\infty)", "\\boxed{(0,\\infty)}", False),
    ("interval-half-open", "(-\\infty, 3]", "$x \\in (-\\infty,3]$", True),
    ("tuple", "(3, -1)", "The point is $(3,-1)$.", True),
    ("tuple-order-matters", "(3, -1)", "\\boxed{(-1,3)}", False),
    ("set-order-does-not", "\\{1,2,3\\}", "\\boxed{\\{3,2,1\\}}", True),
    ("radicals", "\\sqrt{2}/2", "\\boxed{\\frac{1}{\\sqrt{2}}}", True),
    ("polynomial", "x^2+1", "\\boxed{1+x^2}", True),
    ("equation", "2", "\\boxed{x=2}", True),
    ("percent", "10\\%", "\\boxed{10}", True),
    ("dollars", "\\$18.90", "\\boxed{18.90}", True),
    ("text-answer", "\\text{Evelyn}", "\\boxed{\\text{Evelyn}}", True),
    ("unbraced-box", "4", "So \\boxed 4, done.", True),
    ("escaped-braces-in-box", "\\{1,2\\}", "The set is \\boxed{\\{2,1\\}} (checked).", True),
    ("bare-latex-reply", "\\left( 3, \\frac{\\pi}{2} \\right)", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    ("bare-latex-equivalent", HALF, "\\frac{2}{4}", True),
    ("bare-list", "2, 3", "2, 3", True),
    ("bare-number-with-unit", "5", "5 cm", True),
    ("bare-latex-wrong", "(3, 1)", "\\left( 1, 3 \\right)", False),
    ("latex-prose-without-delimiters", "7", "We use \\frac{a}{b} rules.\nThe final answer is 7", True),
    ("different", "72", "\\boxed{73}", False),
    ("no-answer", "72", "I am not sure.", False),
    ("empty", "72", "", False),
]


@pytest.mark.parametrize("reference,reply,success", [c[1:] for c in MATH], ids=[c[0] for c in MATH])
def test_math(math_scorer, reference, reply, success):
    the_task = task(reference)
    math_scorer.check_reference(the_task)
    verdict = judged(math_scorer.score(reply, the_task))
    assert verdict.success is success, verdict


def test_math_alias_and_response(math_scorer):
    verdict = judged(math_scorer.score("so \\boxed{\\pi}", task("3", "\\pi")))
    assert verdict.success and verdict.response == "\\pi"


def test_math_scores_from_worker_threads(math_scorer):
    # math-verify's own timeouts need the main thread; the harness scores from worker threads.
    replies = ["\\boxed{0.5}", "\\boxed{\\frac{1}{3}}", "\\boxed{\\frac{2}{4}}", "1/2"] * 3
    with ThreadPoolExecutor(4) as pool:
        verdicts = list(pool.map(lambda reply: math_scorer.score(reply, task(HALF)), replies))
    assert [judged(v).success for v in verdicts] == [True, False, True, True] * 3


def test_math_reads_the_last_box_whole_however_much_text_follows_it(math_scorer):
    after = "Checking the other cases: 3 + 4 = 7, and so on. " * 460  # 22 KB, its last number 7
    verdict = judged(math_scorer.score("So the answer is \\boxed{4}.\n\n" + after, task("4")))
    assert len(after) > 22_000 and verdict.success and verdict.response == "4", verdict


def nested_fraction(levels: int) -> str:
    """1/(1/(...(1/2))): worth 2 where `levels` is even, 1/2 where it is odd."""
    return "\\frac{1}{" * levels + "2" + "}" * levels


def test_math_refuses_a_box_nested_past_its_bound_rather_than_read_a_fragment(math_scorer):
    deep = "\\boxed{" + nested_fraction(2000) + "}"  # worth 2
    for reference in ("2", HALF):
        verdict = judged(math_scorer.score(deep, task(reference)))
        assert (verdict.success, verdict.reason) == (
            False, "the last \\boxed{...} nests braces more than 50 deep: not read"), verdict
    within = "\\boxed{" + nested_fraction(50) + "}"  # the bound itself: read, and read right
    assert judged(math_scorer.score(within, task("2"))).success
    assert not judged(math_scorer.score(within, task(HALF))).success


@pytest.mark.parametrize(("reply", "reason"), [
    ("So \\boxed{4 and then " + "more words " * 2000,
     "the last \\boxed{ is not closed within 20,000 characters: not read"),
    ("The answer is 4, not " + "9" * 30_000,
     "no line break or space in the reply's last 20,000 characters: not read"),
], ids=["box-never-closed", "no-box-in-one-long-word"])
def test_math_refuses_what_it_could_read_only_in_part(math_scorer, reply, reason):
    verdict = judged(math_scorer.score(reply, task("4")))
    assert (verdict.success, verdict.reason) == (False, reason)


def test_math_a_runaway_reply_times_out_and_the_next_is_scored():
    quick = scorer({"name": "math", "timeout": 1})
    try:
        verdict = judged(quick.score("\\boxed{9^{9^{9^{9}}}}", task("5")))
        assert not verdict.success and verdict.reason == "timed out after 1 s (math-verify)"
        # A computation the helper's alarm cannot stop in time: the scorer kills the helper...
        answer = quick._helper.ask({"forms": ["5"], "reply": "\\boxed{9^{9^{9^{9}}}}", "timeout": 60,
                                    "float_rounding": 6}, limit=0.5)
        assert answer == {"error": "timed out"} and quick._helper.process is None
        # ...and starts another for the next reply.
        assert judged(quick.score("\\boxed{5}", task("5"))).success
    finally:
        quick._helper.close()


# ------------------------------------------------------------------------------------------ choice

OPTIONS = ["Lyon", "Paris", "Nice", "Paris, Texas"]
CHOICE = [
    ("bare", "B", True),
    ("parenthesized", "(B)", True),
    ("closing-paren", "B)", True),
    ("answer-colon", "Answer: B", True),
    ("answer-is-sentence", "The answer is (B).", True),
    ("bold", "**B**", True),
    ("bold-answer-label", "**Answer:** B", True),
    ("label-then-next-line", "**Answer:**\n\nB", True),
    ("lowercase", "answer: b", True),
    ("boxed", "Thus $\\boxed{B}$", True),
    ("boxed-text", "The final answer is $\\boxed{\\text{(B)}}$. I hope it is correct.", True),
    ("after-reasoning", "Lyon is in the south-east (A is wrong).\nSo the correct option is B.", True),
    ("letter-and-text", "B. Paris", True),
    ("option-text", "Paris", True),
    ("option-text-in-sentence", "The answer is paris.", True),
    ("longer-option-text", "Paris, Texas", False),
    ("wrong-letter", "The answer is (C)", False),
    ("ambiguous-or", "A or B", False),
    ("ambiguous-not", "The answer is B, not A.", False),
    ("ambiguous-texts", "Either Lyon or Nice", False),
    ("letter-out-of-range", "E", False),
    ("article-is-no-letter", "The answer is a city in France", False),
    ("nothing", "I cannot tell.", False),
    ("empty", "", False),
]


@pytest.mark.parametrize("reply,success", [c[1:] for c in CHOICE], ids=[c[0] for c in CHOICE])
def test_choice(reply, success):
    the_task = task("B", choices=OPTIONS)
    verdict = judged(scorer("choice").score(reply, the_task))
    assert verdict.success is success, verdict
    if success:
        assert verdict.response == "B"


@pytest.mark.parametrize("reply,reason", [
    ("A or B", "ambiguous: the answer names A and B"),
    ("Either Lyon or Nice", "ambiguous: the answer names the options A, C"),
    ("The answer is (C)", "chose C; the reference is B"),
    ("I cannot tell.", "no option letter or option text in the reply"),
    ("", "empty reply"),
], ids=["letters", "texts", "wrong", "none", "empty"])
def test_choice_reasons(reply, reason):
    assert judged(scorer("choice").score(reply, task("B", choices=OPTIONS))).reason == reason


@pytest.mark.parametrize("reference,choices,reply", [
    ("Paris", OPTIONS, "(B)"),  # GPQA: the reference is the correct option's text
    ("(b)", OPTIONS, "B"),
    ("I", [f"option {i}" for i in range(10)], "the answer is (I)"),  # MMLU-Pro: ten options, A to J
], ids=["text-reference", "wrapped-reference", "ten-options"])
def test_choice_references(reference, choices, reply):
    the_task = task(reference, choices=choices)
    scorer("choice").check_reference(the_task)
    assert judged(scorer("choice").score(reply, the_task)).success


# --------------------------------------------------------------------------------------------- sql

@pytest.fixture(scope="module")
def database(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sql") / "shop.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, city TEXT)")
        connection.executemany("INSERT INTO people VALUES (?, ?, ?)",
                               [(1, "Ana", "Lima"), (2, "Bo", "Oslo"), (3, "Cy", "Lima"), (4, "Di", "Rome")])
    connection.close()
    return path


def sql_task(path: Path, reference: str) -> Task:
    return task(reference, task_id="sql1", db_path=str(path))


TIMEOUT_REPLY = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
PEOPLE = "SELECT name FROM people"
READ_ONLY = "SQL error: not authorized (replies may only read the database)"
SQL = [
    ("same-query", {}, "SELECT name FROM people", "SELECT name FROM people", True, None),
    ("reordered-rows", {}, PEOPLE, "SELECT name FROM people ORDER BY name DESC", True, None),
    ("fenced-in-prose", {}, "SELECT name FROM people WHERE city = 'Lima'",
     "Here it is:\n```sql\nSELECT name\nFROM people\nWHERE city = 'Lima';\n```\nIt filters by city.",
     True, None),
    ("untagged-fence", {}, "SELECT count(*) FROM people", "```\nSELECT COUNT(id) FROM people\n```",
     True, None),
    ("reference-order-by-kept", {}, "SELECT name FROM people ORDER BY id DESC",
     "SELECT name FROM people ORDER BY id DESC", True, None),
    ("reference-order-by-broken", {}, "SELECT name FROM people ORDER BY id DESC",
     "SELECT name FROM people ORDER BY id", False, "same rows in another order; the reference has ORDER BY"),
    ("order-ignored", {"order": "ignore"}, "SELECT name FROM people ORDER BY id DESC",
     "SELECT name FROM people ORDER BY id", True, None),
    ("order-by-in-subquery-only", {}, "SELECT name FROM (SELECT name FROM people ORDER BY id)",
     "SELECT name FROM people ORDER BY name DESC", True, None),
    ("duplicates-count", {}, "SELECT city FROM people", "SELECT DISTINCT city FROM people", False,
     "3 rows; the reference has 4"),
    ("duplicates-ignored-as-bird", {"rows": "set", "order": "ignore"}, "SELECT city FROM people",
     "SELECT DISTINCT city FROM people", True, None),
    ("columns-in-order", {}, "SELECT id, name FROM people", "SELECT name, id FROM people", False,
     "different result from the reference"),
    ("columns-any-as-spider", {"columns": "any"}, "SELECT id, name FROM people",
     "SELECT name, id FROM people", True, None),
    ("int-equals-real", {}, "SELECT id FROM people", "SELECT CAST(id AS REAL) FROM people", True, None),
    ("wrong-rows", {}, "SELECT name FROM people WHERE city = 'Lima'", "SELECT name FROM people WHERE id < 3",
     False, "different result from the reference"),
    ("syntax-error", {}, "SELECT name FROM people", "SELEC name FROM people", False,
     'SQL error: near "SELEC": syntax error'),
    ("unknown-column", {}, "SELECT name FROM people", "SELECT nme FROM people", False,
     "SQL error: no such column: nme"),
    ("two-statements", {}, "SELECT name FROM people", "SELECT name FROM people; SELECT 1", False, None),
    ("delete-refused", {}, PEOPLE, "DELETE FROM people", False, READ_ONLY),
    ("drop-refused", {}, PEOPLE, "DROP TABLE people", False, READ_ONLY),
    ("attach-refused", {}, "SELECT name FROM people", "ATTACH DATABASE 'elsewhere.db' AS other", False, None),
    ("pragma-refused", {}, "SELECT name FROM people", "PRAGMA table_info(people)", False, READ_ONLY),
    ("timeout", {"timeout": 0.2}, "SELECT name FROM people", TIMEOUT_REPLY, False, "timed out after 0.2 s"),
    ("too-many-rows", {"max_rows": 5}, "SELECT name FROM people",
     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100) SELECT x FROM c", False,
     "more than 5 rows"),
    # A sort of 10^8 wide rows: gigabytes of temporary files on disk, were they not kept in bounded memory.
    ("temporary-results-bounded", {"max_memory_mb": 50, "timeout": 120}, "SELECT name FROM people",
     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100000000) "
     "SELECT x, printf('%0100d', x) FROM c ORDER BY -x", False,
     "its temporary results passed max_memory_mb=50"),
    ("empty-reply", {}, "SELECT name FROM people", "", False, "no SQL in the reply"),
    ("empty-fence", {}, "SELECT name FROM people", "```sql\n```", False, "no SQL in the reply"),
]


@pytest.mark.parametrize("options,reference,reply,success,reason", [c[1:] for c in SQL],
                         ids=[c[0] for c in SQL])
def test_sql(database, options, reference, reply, success, reason):
    the_scorer = scorer({"name": "sql", **options})
    the_task = sql_task(database, reference)
    the_scorer.check_reference(the_task)
    verdict = judged(the_scorer.score(reply, the_task))
    assert verdict.success is success, verdict
    if reason is not None:
        assert verdict.reason == reason


def test_sql_leaves_the_database_as_it_was(database, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    the_scorer, the_task = scorer("sql"), sql_task(database, "SELECT count(*) FROM people")
    for reply in ["DELETE FROM people", "INSERT INTO people VALUES (9, 'Ed', 'Rome')", "DROP TABLE people",
                  "ATTACH DATABASE 'elsewhere.db' AS other", "CREATE TABLE x (y)",
                  "UPDATE people SET name = ''"]:
        assert not judged(the_scorer.score(reply, the_task)).success
    assert judged(the_scorer.score("SELECT 4", the_task)).success
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- references refused

def refusals(database: Path) -> list[tuple[str, Any, Task, str]]:
    return [
        ("includes-empty", "includes", task("?!"),
         "task t1: reference '?!' is empty once case and punctuation"),
        ("includes-empty-alias", "includes", task("Paris", " "), "task t1: reference ' ' is empty"),
        ("regex-empty", {"name": "regex", "pattern": "x"}, task("..."), "task t1: reference '...' is empty"),
        ("numeric-no-number", "numeric", task("seventy-two"),
         "task t1: reference 'seventy-two' holds no number, not exactly one"),
        ("numeric-two-numbers", "numeric", task("3 to 5"), "task t1: reference '3 to 5' holds 2 numbers"),
        ("numeric-bad-alias", "numeric", task("5", "five"), "task t1: reference 'five' holds no number"),
        ("math-unparsable", "math", task("\\frac{"),
         "task t1: math-verify cannot parse the reference '\\\\frac{'"),
        ("math-empty", "math", task(""), "task t1: math-verify cannot parse the reference ''"),
        ("choice-no-choices", "choice", task("B"),
         "task t1: metadata['choices'] must be a list of option texts"),
        ("choice-not-strings", "choice", task("B", choices=[1, 2]), "task t1: metadata['choices'] must be"),
        ("choice-one-option", "choice", task("A", choices=["x"]),
         "task t1: 1 choices; 2 to 26 can be lettered"),
        ("choice-letter-out-of-range", "choice", task("E", choices=OPTIONS),
         "task t1: reference 'E' is neither a letter A-D nor the text of an option"),
        ("choice-unknown-text", "choice", task("Marseille", choices=OPTIONS),
         "task t1: reference 'Marseille' is neither a letter A-D"),
        ("choice-duplicate-options", "choice", task("x", choices=["x", "X", "y"]),
         "task t1: reference 'x' is the text of several options (A, B)"),
        ("sql-no-db-path", "sql", task("SELECT 1"), "task t1: metadata has no db_path"),
        ("sql-missing-database", "sql", task("SELECT 1", db_path=str(database.parent / "nope.sqlite")),
         f"task t1: database {database.parent / 'nope.sqlite'} not found"),
        ("sql-reference-fails", "sql", sql_task(database, "SELECT nme FROM people"),
         "task sql1: the reference query fails on shop.sqlite: SQL error: no such column: nme"),
        ("sql-reference-too-many-rows", {"name": "sql", "max_rows": 2},
         sql_task(database, "SELECT * FROM people"),
         "task sql1: the reference query fails on shop.sqlite: more than 2 rows"),
    ]


REFUSAL_IDS = [r[0] for r in refusals(Path("/db/shop.sqlite"))]


@pytest.mark.parametrize("index", range(len(REFUSAL_IDS)), ids=REFUSAL_IDS)
def test_a_reference_the_scorer_cannot_read_is_refused(database, math_scorer, index):
    _, spec, the_task, message = refusals(database)[index]
    the_scorer = math_scorer if spec == "math" else scorer(spec)
    with pytest.raises(ValueError) as refused:
        the_scorer.check_reference(the_task)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value), str(refused.value)
    # Scored anyway (a caller that skipped the check): a failed verdict, not an exception.
    assert not judged(the_scorer.score("B", the_task)).success


# ------------------------------------------------------------------------------------- hostile

_JUNK = bytes(random.Random(0).randrange(256) for _ in range(5000)).decode("latin-1")
HOSTILE = {
    "empty": "", "blank": " \n\t ", "nul-and-control": "\x00\x01\x1b[2J\x7f",
    "lone-surrogate": "\ud800 x \udfff",
    "binary-junk": _JUNK, "huge": "a" * 1_000_000, "anchors": "answer:" * 100_000,
    "boxes": "\\boxed{" * 10_000, "digits": "9" * 100_000, "fences": "```sql\n" * 1000,
    "parens": "(" * 100_000, "separators": "1," * 50_000, "dollars": "$" * 100_000,
}


@pytest.mark.parametrize("reply", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_reply_is_a_failed_verdict(database, math_scorer, reply):
    cases = [(scorer("includes"), task("Paris")),
             (scorer({"name": "regex", "pattern": r"answer: (?P<answer>\w+)"}), task("Paris")),
             (scorer("numeric"), task("5")), (math_scorer, task("5")),
             (scorer("choice"), task("B", choices=OPTIONS)),
             (scorer({"name": "sql", "timeout": 2}), sql_task(database, "SELECT name FROM people"))]
    for the_scorer, the_task in cases:
        verdict = judged(the_scorer.score(reply, the_task))
        assert not verdict.success, (the_scorer.name, verdict)


def test_a_reply_that_is_not_a_string_is_a_failed_verdict(database, math_scorer):
    for the_scorer, the_task in [(scorer("includes"), task("5")), (scorer({"name": "regex", "pattern": "5"}),
                                 task("5")), (scorer("numeric"), task("5")), (math_scorer, task("5")),
                                 (scorer("choice"), task("B", choices=OPTIONS)),
                                 (scorer("sql"), sql_task(database, "SELECT 5"))]:
        assert not judged(the_scorer.score(None, the_task)).success, the_scorer.name  # type: ignore[arg-type]


# -------------------------------------------------------------------------------- registry, options

def test_each_scorer_is_found_by_name_with_no_import():
    # A fresh interpreter that imports only the registry: it must find every module by itself.
    code = ("import json; from envs.scorers import scorer; print(json.dumps({n: type(scorer("
            "n if n != 'regex' else {'name': n, 'pattern': 'x'})).__module__ "
            f"for n in {sorted(NAMES)!r}}}))")
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(found.stdout) == NAMES
    assert set(NAMES) <= set(Scorer.registry)


def a_scorer_class(name: str, module: str, qualname: str = "Mine") -> type[Scorer]:
    """A scorer class as `class <qualname>(Scorer): name = <name>` defines it in `module`."""
    body = {"name": name, "__module__": module, "__qualname__": qualname,
            "score": lambda self, reply, task: Verdict(score=1.0, success=True, response=reply, reason="any")}
    return type(qualname, (Scorer,), body)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, type[Scorer]]:
    """The registry, with every built-in scorer in it; the names a test adds gone after it."""
    for name in [*NAMES, "exact", "judge", "code"]:
        scorer_class(name)
    monkeypatch.setattr(Scorer, "registry", dict(Scorer.registry))
    return Scorer.registry


def test_a_second_scorer_of_a_built_in_name_is_refused_in_one_line_naming_both(registry):
    with pytest.raises(ValueError) as refused:
        a_scorer_class("exact", "myscorers.exact", "MyExact")
    assert str(refused.value) == ("scorer 'exact' is defined twice: by envs.scorers.exact:Exact and by "
                                  "myscorers.exact:MyExact; a name belongs to one scorer, so give this one "
                                  "another")
    assert registry["exact"].__module__ == "envs.scorers.exact"
    assert type(scorer("exact")).__module__ == "envs.scorers.exact"


def test_two_scorers_of_ones_own_cannot_share_a_name_either(registry):
    first = a_scorer_class("f1", "myscorers.f1", "F1")
    with pytest.raises(ValueError, match=r"^scorer 'f1' is defined twice: by myscorers\.f1:F1 and by "
                                         r"theirs\.f1:TokenF1; "):
        a_scorer_class("f1", "theirs.f1", "TokenF1")
    assert registry["f1"] is first


def test_the_same_definition_again_takes_its_own_name_back(registry):
    # Its module imported anew (a reload, a second import of one file): the newer class holds the name.
    first = a_scorer_class("f1", "myscorers.f1", "F1")
    again = a_scorer_class("f1", "myscorers.f1", "F1")
    assert first is not again and registry["f1"] is again and isinstance(scorer("f1"), again)


def test_a_scorer_defined_before_the_built_ins_are_imported_still_meets_them():
    # A fresh interpreter in which nothing has imported envs/scorers/exact.py yet.
    code = ("from envs.scorers import Scorer\ntry:\n"
            "    class Mine(Scorer):\n        name = 'exact'\n        def score(self, reply, task): ...\n"
            "except ValueError as refused:\n    print(refused)\n")
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.startswith("scorer 'exact' is defined twice: by envs.scorers.exact:Exact and by "
                                   "__main__:Mine;"), found.stdout


@pytest.mark.parametrize("spec,message", [
    ({"name": "regex", "pattern": "("}, "scorer regex: pattern '(' is not a regular expression"),
    ({"name": "regex", "pattern": "x", "flags": "iq"}, "scorer regex: unknown flag(s) 'q'"),
    ({"name": "regex"}, "scorer regex: "),
    ({"name": "numeric", "tolerance": -1}, "scorer numeric: tolerance must be a number >= 0"),
    ({"name": "numeric", "digits": 2}, "scorer numeric: "),
    ({"name": "math", "timeout": 0}, "scorer math: timeout must be a number of seconds > 0"),
    ({"name": "sql", "rows": "bag"}, "scorer sql: rows must be one of multiset, set"),
    ({"name": "sql", "max_rows": 0}, "scorer sql: max_rows must be an integer >= 1"),
    ({"name": "choice", "shuffle": True}, "scorer choice: "),
    ({"name": "includes", "case": True}, "scorer includes: "),
], ids=["regex-pattern", "regex-flag", "regex-no-pattern", "numeric-tolerance", "numeric-unknown",
        "math-timeout", "sql-rows", "sql-max-rows", "choice-no-shuffle", "includes-unknown"])
def test_a_bad_option_is_refused_by_name(spec, message):
    with pytest.raises(ValueError) as refused:
        scorer(spec)
    assert str(refused.value).startswith(message), str(refused.value)


def test_scorers_survive_pickling(database, math_scorer):
    # Ray ships environments (and so their scorers) to its workers.
    math_copy = pickle.loads(pickle.dumps(math_scorer))
    sql_copy = pickle.loads(pickle.dumps(scorer("sql")))
    try:
        assert judged(math_copy.score("\\boxed{0.5}", task(HALF))).success
        assert judged(sql_copy.score("SELECT 4", sql_task(database, "SELECT count(*) FROM people"))).success
    finally:
        math_copy._helper.close()


def test_a_scorer_module_that_cannot_be_imported_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^scorer nowhere_at_all.f1:F1: cannot import nowhere_at_all.f1 \("):
        scorer("nowhere_at_all.f1:F1")


def test_the_pronoun_i_is_not_option_i_of_a_ten_option_question():
    task = Task(task_id="t", family="f", question="q", answer="B", metadata={"choices": list("0123456789")})
    assert scorer("choice").score("I think B.", task).success
    assert scorer("choice").score("I am not sure.", task).response is None
    assert scorer("choice").score("(I)", task).response == "I"
