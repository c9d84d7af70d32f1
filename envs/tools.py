"""Stateful tool use: a file system, a bank ledger and a calendar, driven by function calls.

Each backend is a small Python class whose public methods are the tools (envs/tool_calls.py derives
their JSON schemas from the type hints). A task gives the agent one backend in a seeded initial
state and an instruction; the agent calls tools until it replies in plain text. The checker
compares the backend's **final state** with the state the reference solution leaves (it is
replayed on a copy of the initial state, so the two can never disagree by construction), and,
where the task asks a question or needs a clarifying reply, looks for the expected words in the
final reply, in the spirit of BFCL's multi-turn categories and tau-bench's state checks.

Families recur across the stream with fresh names, numbers and dates, so what an agent learns
(amounts in cents, dates as YYYY-MM-DD, look it up before acting, ask when a value is missing,
copy is not move) can transfer:
- single call: `files.write`, `bank.transfer`, `calendar.create`;
- several calls, each needing the last one's result: `files.find_move`, `bank.half`,
  `calendar.cancel`, and the question `bank.balance` (its reply is checked);
- a required value is missing, the right move is to ask and change nothing: `*.missing`;
- a distractor tool that looks right and is not: `files.backup` (copy, not move), `bank.pay`
  (transfer, not request_payment), `calendar.block` (an event, not a reminder).
The reference solution (calls and reply, as JSON) is the task's `answer`: the scripted model
replays it, agents never see it.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable, Sequence
from datetime import date, timedelta
from typing import Any, NamedTuple

from envs.base import EnvEpisode, Environment, Score, StepResult, Task, normalize
from envs.tool_calls import Call, ToolBox, ToolError, ToolResult

# --- backends: every public method is a tool -------------------------------------------------


class Files:
    """Files addressed by paths such as 'inbox/report.txt'; directories exist while they hold files."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = dict(files)

    def state(self) -> dict[str, Any]:
        return {"files": dict(sorted(self.files.items()))}

    def _existing(self, path: str) -> str:
        if path not in self.files:
            raise ToolError(f"no such file: {path}")
        return path

    def list_files(self, directory: str) -> list[str]:
        """List the paths of the files directly inside a directory ('' for the top level)."""
        prefix = directory.strip("/") + "/" if directory.strip("/") else ""
        return sorted(p for p in self.files if p.startswith(prefix) and "/" not in p[len(prefix):])

    def read_file(self, path: str) -> str:
        """Return the content of a file."""
        return self.files[self._existing(path)]

    def write_file(self, path: str, content: str) -> str:
        """Create a file with this content, or replace the content of an existing one."""
        self.files[path.strip("/")] = content
        return "written"

    def move_file(self, source: str, destination: str) -> str:
        """Move (rename) a file: it is no longer at the source path afterwards."""
        self.files[destination.strip("/")] = self.files.pop(self._existing(source))
        return "moved"

    def copy_file(self, source: str, destination: str) -> str:
        """Copy a file to another path; the source stays where it is."""
        self.files[destination.strip("/")] = self.files[self._existing(source)]
        return "copied"

    def delete_file(self, path: str) -> str:
        """Delete a file."""
        del self.files[self._existing(path)]
        return "deleted"


class Bank:
    """Accounts with balances in whole cents."""

    def __init__(self, balances: dict[str, int], requests: list[dict[str, Any]] | None = None) -> None:
        self.balances = dict(balances)
        self.requests = list(requests or [])

    def state(self) -> dict[str, Any]:
        return {"balances": dict(sorted(self.balances.items())), "requests": self.requests}

    def _account(self, name: str) -> str:
        if name not in self.balances:
            raise ToolError(f"no such account: {name!r}; the accounts are {', '.join(sorted(self.balances))}")
        return name

    def list_accounts(self) -> list[str]:
        """List the account names."""
        return sorted(self.balances)

    def get_balance(self, account: str) -> int:
        """Return an account's balance, in cents (an integer: 1250 is $12.50)."""
        return self.balances[self._account(account)]

    def transfer(self, source: str, destination: str, amount_cents: int) -> str:
        """Move money now from one account to another. amount_cents is in cents: $12.50 is 1250."""
        self._account(destination)
        if amount_cents <= 0:
            raise ToolError("amount_cents must be a positive number of cents")
        if self.balances[self._account(source)] < amount_cents:
            raise ToolError(f"insufficient funds in {source}")
        self.balances[source] -= amount_cents
        self.balances[destination] += amount_cents
        return f"transferred {amount_cents} cents from {source} to {destination}"

    def request_payment(self, payer: str, payee: str, amount_cents: int) -> str:
        """Send the payer a request to pay the payee later; no money moves now."""
        self.requests.append({"payer": self._account(payer), "payee": self._account(payee),
                              "amount_cents": amount_cents})
        return "payment requested"


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d")


class Calendar:
    """Events with a title, a date (YYYY-MM-DD), a start time (HH:MM, 24-hour) and a length."""

    def __init__(self, events: dict[str, dict[str, Any]],
                 reminders: list[dict[str, str]] | None = None) -> None:
        self.events = copy.deepcopy(events)
        self.reminders = list(reminders or [])

    def state(self) -> dict[str, Any]:
        """The events as values: ids are generated, so a right calendar reached by another path
        (a wrong event created, then cancelled) is still right."""
        events = sorted(tuple(sorted(e.items())) for e in self.events.values())
        reminders = sorted(tuple(sorted(r.items())) for r in self.reminders)
        return {"events": [dict(e) for e in events], "reminders": [dict(r) for r in reminders]}

    @staticmethod
    def _date(value: str) -> str:
        if not _DATE.fullmatch(value):
            raise ToolError(f"date must be YYYY-MM-DD, e.g. 2026-03-04 (got {value!r})")
        try:
            date.fromisoformat(value)
        except ValueError:
            raise ToolError(f"no such date: {value}") from None
        return value

    def list_events(self, date: str) -> list[dict[str, Any]]:
        """List the events on a date (YYYY-MM-DD) with their ids."""
        day = self._date(date)
        return [{"event_id": key, **event} for key, event in sorted(self.events.items())
                if event["date"] == day]

    def create_event(self, title: str, date: str, start: str, duration_minutes: int) -> str:
        """Add an event: date as YYYY-MM-DD, start as HH:MM on a 24-hour clock (2:30 pm is 14:30)."""
        if not _TIME.fullmatch(start):
            raise ToolError(f"start must be HH:MM on a 24-hour clock, e.g. 14:30 (got {start!r})")
        if duration_minutes <= 0:
            raise ToolError("duration_minutes must be positive")
        event_id = f"ev{len(self.events) + 1:03d}"
        while event_id in self.events:
            event_id += "x"
        self.events[event_id] = {"title": title, "date": self._date(date), "start": start,
                                 "minutes": duration_minutes}
        return event_id

    def cancel_event(self, event_id: str) -> str:
        """Remove an event by its id (see list_events)."""
        if event_id not in self.events:
            raise ToolError(f"no such event id: {event_id!r}")
        del self.events[event_id]
        return "cancelled"

    def create_reminder(self, title: str, date: str) -> str:
        """Add a reminder note for a date; it does not block time in the calendar."""
        self.reminders.append({"title": title, "date": self._date(date)})
        return "reminder added"


BACKENDS: dict[str, Callable[..., Any]] = {"files": Files, "bank": Bank, "calendar": Calendar}

# --- task families ---------------------------------------------------------------------------

NAMES = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory",
         "nina", "oscar", "peggy", "rupert", "sybil", "trent", "victor", "wendy", "yusuf")
WORDS = ("budget", "garden", "invoice", "holiday", "meeting", "recipe", "contract", "travel", "poem",
         "report", "taxes", "lecture", "receipt", "design", "survey", "payroll", "roadmap", "minutes")
TITLES = ("Dentist", "Standup", "Review", "Lunch with Sam", "Gym", "Call mom", "Piano lesson",
          "Team retro", "Doctor", "Haircut", "Book club", "Budget sync", "Yoga", "Interview")


class Solution:
    """What a task's reference solution does: its calls in order and, if the task wants one, the
    words its final reply must contain (any one of them)."""

    def __init__(self, backend: str, initial: dict[str, Any], calls: list[tuple[str, dict[str, Any]]],
                 reply: str, reply_contains: Sequence[str] = ()) -> None:
        self.backend, self.initial, self.calls, self.reply = backend, initial, calls, reply
        self.reply_contains = list(reply_contains)


def _dollars(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


def _spoken_date(day: date) -> str:
    return f"{day:%B} {day.day}, {day.year}"


def _spoken_time(hour: int, minute: int) -> str:
    suffix = "am" if hour < 12 else "pm"
    shown = hour % 12 or 12
    return f"{shown}:{minute:02d} {suffix}" if minute else f"{shown} {suffix}"


def _accounts(rng: random.Random, count: int = 4) -> dict[str, int]:
    return {name: rng.randrange(5_000, 200_000) for name in rng.sample(NAMES, count)}


def _day(rng: random.Random) -> date:
    return date(2026, 1, 5) + timedelta(days=rng.randrange(0, 300))


def _files(rng: random.Random) -> dict[str, str]:
    words = rng.sample(WORDS, 4)
    return {f"inbox/{w}_{rng.randrange(10, 99)}.txt": f"Notes about the {w}." for w in words}


def files_write(rng: random.Random) -> tuple[str, Solution]:
    name, text = rng.choice(WORDS), f"Remember the {rng.choice(WORDS)} on day {rng.randrange(1, 28)}."
    path = f"notes/{name}_{rng.randrange(100, 999)}.txt"
    return (f"Create the file {path} containing exactly: {text}",
            Solution("files", {"files": _files(rng)}, [("write_file", {"path": path, "content": text})],
                     f"Created {path}."))


def files_find_move(rng: random.Random) -> tuple[str, Solution]:
    files = _files(rng)
    target = rng.choice(sorted(files))
    keyword = files[target].split()[-1].rstrip(".")
    folder = rng.choice(("archive", "done", "old", "processed"))
    destination = f"{folder}/" + target.split("/", 1)[1]
    return (f"One file in the inbox directory mentions the {keyword}. Move it into the {folder} "
            "directory, keeping its file name.",
            Solution("files", {"files": files}, [("list_files", {"directory": "inbox"}),
                                                 ("read_file", {"path": target}),
                                                 ("move_file", {"source": target,
                                                                "destination": destination})],
                     f"Moved {target} to {destination}."))


def files_missing(rng: random.Random) -> tuple[str, Solution]:
    files = _files(rng)
    target = rng.choice(sorted(files))
    return (f"Please rename {target}.",
            Solution("files", {"files": files}, [], "What should the new name be?", ("name",)))


def files_backup(rng: random.Random) -> tuple[str, Solution]:
    files = _files(rng)
    target = rng.choice(sorted(files))
    destination = "backup/" + target.split("/", 1)[1]
    return (f"Make a backup of {target} at {destination}. The original must stay where it is.",
            Solution("files", {"files": files},
                     [("copy_file", {"source": target, "destination": destination})],
                     f"Backed up {target}."))


def bank_transfer(rng: random.Random) -> tuple[str, Solution]:
    accounts = _accounts(rng)
    source, destination = rng.sample(sorted(accounts), 2)
    cents = rng.randrange(100, 4_000)
    return (f"Transfer {_dollars(cents)} from {source} to {destination}.",
            Solution("bank", {"balances": accounts},
                     [("transfer", {"source": source, "destination": destination, "amount_cents": cents})],
                     "Done."))


def bank_half(rng: random.Random) -> tuple[str, Solution]:
    accounts = _accounts(rng)
    source, destination = rng.sample(sorted(accounts), 2)
    half = accounts[source] // 2
    return (f"Move half of {source}'s balance to {destination} (rounded down to a whole cent).",
            Solution("bank", {"balances": accounts},
                     [("get_balance", {"account": source}),
                      ("transfer", {"source": source, "destination": destination, "amount_cents": half})],
                     f"Moved {_dollars(half)}."))


def bank_balance(rng: random.Random) -> tuple[str, Solution]:
    accounts = _accounts(rng)
    account = rng.choice(sorted(accounts))
    shown = _dollars(accounts[account])
    return (f"What is {account}'s balance? Answer in dollars, like $12.34.",
            Solution("bank", {"balances": accounts}, [("get_balance", {"account": account})],
                     f"{account} has {shown}.", (shown.lstrip("$"), f"{accounts[account] / 100:,.2f}")))


def bank_missing(rng: random.Random) -> tuple[str, Solution]:
    accounts = _accounts(rng)
    source, destination = rng.sample(sorted(accounts), 2)
    return (f"Send some money from {source} to {destination}.",
            Solution("bank", {"balances": accounts}, [], "How much should I send?", ("how much", "amount")))


def bank_pay(rng: random.Random) -> tuple[str, Solution]:
    accounts = _accounts(rng)
    payer, payee = rng.sample(sorted(accounts), 2)
    cents = rng.randrange(100, 4_000)
    return (f"Pay {payee} {_dollars(cents)} from {payer}'s account right now.",
            Solution("bank", {"balances": accounts},
                     [("transfer", {"source": payer, "destination": payee, "amount_cents": cents})], "Paid."))


def _calendar(rng: random.Random, day: date) -> dict[str, dict[str, Any]]:
    titles = rng.sample(TITLES, 3)
    events = {}
    for number, title in enumerate(titles, start=1):
        when = day if number < 3 else day + timedelta(days=1)
        events[f"ev{rng.randrange(100, 999)}{number}"] = {"title": title, "date": when.isoformat(),
                                                          "start": f"{8 + 2 * number:02d}:00", "minutes": 30}
    return events


def calendar_create(rng: random.Random) -> tuple[str, Solution]:
    day, hour, minute = _day(rng), rng.randrange(8, 19), rng.choice((0, 15, 30, 45))
    title, minutes = rng.choice(TITLES), rng.choice((15, 30, 45, 60, 90))
    return (f"Add '{title}' to my calendar on {_spoken_date(day)} at {_spoken_time(hour, minute)} "
            f"for {minutes} minutes.",
            Solution("calendar", {"events": _calendar(rng, day + timedelta(days=3))},
                     [("create_event", {"title": title, "date": day.isoformat(),
                                        "start": f"{hour:02d}:{minute:02d}", "duration_minutes": minutes})],
                     "Added."))


def calendar_cancel(rng: random.Random) -> tuple[str, Solution]:
    day = _day(rng)
    events = _calendar(rng, day)
    event_id, event = next((k, v) for k, v in sorted(events.items()) if v["date"] == day.isoformat())
    return (f"Cancel my '{event['title']}' on {_spoken_date(day)}.",
            Solution("calendar", {"events": events},
                     [("list_events", {"date": day.isoformat()}), ("cancel_event", {"event_id": event_id})],
                     "Cancelled."))


def calendar_missing(rng: random.Random) -> tuple[str, Solution]:
    day, title = _day(rng), rng.choice(TITLES)
    return (f"Add '{title}' to my calendar on {_spoken_date(day)} for 30 minutes.",
            Solution("calendar", {"events": _calendar(rng, day)}, [], "What time should it start?",
                     ("time", "when")))


def calendar_block(rng: random.Random) -> tuple[str, Solution]:
    day, hour = _day(rng), rng.randrange(7, 20)
    title, minutes = rng.choice(TITLES), rng.choice((30, 45, 60))
    return (f"Block {minutes} minutes in my calendar for '{title}' on {_spoken_date(day)} at "
            f"{_spoken_time(hour, 0)}.",
            Solution("calendar", {"events": _calendar(rng, day + timedelta(days=2))},
                     [("create_event", {"title": title, "date": day.isoformat(), "start": f"{hour:02d}:00",
                                        "duration_minutes": minutes})], "Blocked."))


FAMILIES: dict[str, Callable[[random.Random], tuple[str, Solution]]] = {
    "files.write": files_write, "files.find_move": files_find_move, "files.missing": files_missing,
    "files.backup": files_backup,
    "bank.transfer": bank_transfer, "bank.half": bank_half, "bank.balance": bank_balance,
    "bank.missing": bank_missing, "bank.pay": bank_pay,
    "calendar.create": calendar_create, "calendar.cancel": calendar_cancel,
    "calendar.missing": calendar_missing, "calendar.block": calendar_block,
}

INSTRUCTIONS = ("Use the tools to do what the user asks, then reply to the user in plain text. If a "
                "value you need is missing, ask for it instead of guessing.")


def make_backend(name: str, state: dict[str, Any]) -> Any:
    return BACKENDS[name](**copy.deepcopy(state))


class _SolutionCall(NamedTuple):
    """A call of the reference solution, replayed here (no model made it: it has no id)."""

    name: str
    arguments: str
    id: str = ""


def final_state(solution: Solution) -> dict[str, Any]:
    """The state the reference solution leaves: its calls replayed on a copy of the initial state."""
    box = ToolBox(make_backend(solution.backend, solution.initial))
    for name, arguments in solution.calls:
        result = box.call(_SolutionCall(name, json.dumps(arguments)))
        if result.error is not None:
            raise AssertionError(f"reference solution fails: {result.content}")
    return box.backend.state()


class ToolEpisode(EnvEpisode):
    """Tool calls until the agent replies in plain text (or `max_steps` actions)."""

    multi_step = True

    def __init__(self, task: Task, max_steps: int) -> None:
        super().__init__(task)
        self.box = ToolBox(make_backend(task.metadata["backend"], task.metadata["initial"]))
        self.max_steps = max_steps
        self.steps = 0
        self.errors = 0
        self.reply: str | None = None

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.box.specs

    @property
    def observation(self) -> str:
        return f"{INSTRUCTIONS}\n\nUser: {self._task.question}"

    def call_tool(self, call: Call) -> ToolResult:
        if self.done:
            raise RuntimeError(f"episode of task {self._task.task_id} is already done")
        result = self.box.call(call)
        self.errors += result.error is not None
        self.steps += 1
        self.done = self.steps >= self.max_steps
        return result

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError(f"episode of task {self._task.task_id} is already done")
        self.reply = action.strip()
        self.steps += 1
        self.done = True
        return StepResult(observation="", reward=self.score().score, done=True)

    def checks(self) -> dict[str, bool]:
        """Each check of the task: the final state, and the reply where the task wants one."""
        results = {"state": self.box.backend.state() == self._task.metadata["expected"]}
        wanted = self._task.metadata["reply_contains"]
        if wanted:
            reply = f" {normalize(self.reply or '')} "
            results["reply"] = any(f" {normalize(w)} " in reply for w in wanted)
        return results

    def score(self) -> Score:
        checks = self.checks()
        failed = [name for name, ok in checks.items() if not ok]
        summary = f"{self.steps} steps, {self.errors} tool errors, " + (
            f"failed: {', '.join(failed)}" if failed else "all checks passed")
        return Score(success=not failed, score=sum(checks.values()) / len(checks), response=summary)


class ToolTasks(Environment):
    family_option = "families"
    default_families = tuple(FAMILIES)
    interleaved_families = tuple(FAMILIES)

    def __init__(self, families: Sequence[str] | None = None, tasks_per_family: int = 20, seed: int = 0,
                 max_steps: int = 10) -> None:
        families = self.default_families if families is None else families
        unknown = sorted(set(families) - set(FAMILIES))
        if unknown or not families:
            raise ValueError(f"env.families: unknown {unknown or 'none given'}; "
                             f"choose from {sorted(FAMILIES)}")
        if tasks_per_family < 1 or max_steps < 1:
            raise ValueError("env.tasks_per_family and env.max_steps must be >= 1")
        self.families = list(families)
        self.tasks_per_family = tasks_per_family
        self.seed = seed
        self.max_steps = max_steps

    def tasks(self) -> list[Task]:
        pool: list[Task] = []
        for family in self.families:
            questions: set[str] = set()
            rng = random.Random(f"{family}/{self.seed}")
            for _ in range(self.tasks_per_family * 20):  # a small family repeats itself: skip the repeats
                if len(questions) == self.tasks_per_family:
                    break
                question, solution = FAMILIES[family](rng)
                if question in questions:
                    continue
                questions.add(question)
                pool.append(self._task(family, len(questions) - 1, question, solution))
        return pool

    @staticmethod
    def _task(family: str, index: int, question: str, solution: Solution) -> Task:
        reference = {"calls": [{"tool": name, "arguments": args} for name, args in solution.calls],
                     "reply": solution.reply}
        return Task(task_id=f"{family}:{index}", family=family, question=question,
                    answer=json.dumps(reference),
                    metadata={"backend": solution.backend, "initial": solution.initial,
                              "expected": final_state(solution), "reply_contains": solution.reply_contains})

    def reset(self, task: Task) -> EnvEpisode:
        return ToolEpisode(task, self.max_steps)
