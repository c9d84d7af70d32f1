"""The two sides of a program tested apart (harness/sandbox/apart.py), and the plain values between them.

Shipped as text into two sandboxes (standard library only, like inside.py): in one, `serve_program`
runs the reply's program and answers calls of its functions; in the other, `run_tests` runs the
task's tests with each name they use from the program bound to a stand-in that calls across. What
crosses is one JSON line per message over two pipes (the tool's descriptors 4, read, and 5, write):
plain values only, by their exact type (None, bool, int, float, str; list, tuple, dict, set,
frozenset, bytes, complex of those; the standard library's OrderedDict, defaultdict and Counter as
dicts), and an exception by its type's name and message. JSON can carry no code and no class, so
whatever the program's process sends (it may replace this very code in its own interpreter), the
tests get builtin values and builtin exceptions, and the verdict is the tests process's alone.
"""

import builtins
import json
import os

LINK_READ, LINK_WRITE = 4, 5
"""Where each side finds its ends of the link (harness/sandbox/inside.py places them)."""
MAX_MESSAGE = 8 << 20
"""A message longer than this (bytes) is refused: the reader never holds more."""
MAX_DEPTH = 200
"""Values nested deeper than this do not cross (the decoder's recursion stays bounded)."""


class Uncrossable(Exception):
    """A value that is not plain, or a message that is not one of the protocol's."""


# ----- values -----

_DICTS = ("OrderedDict", "defaultdict", "Counter")


def encode(value, depth=0):
    """`value` as JSON data: a scalar as itself, anything else as [tag, payload]. Only exact types
    cross: a subclass (with its own __eq__, say) is refused, never coerced."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if depth > MAX_DEPTH:
        raise Uncrossable(f"nested deeper than {MAX_DEPTH}")
    if kind in (list, tuple, set, frozenset):
        return [kind.__name__, [encode(item, depth + 1) for item in value]]
    if kind is dict or (kind.__module__ == "collections" and kind.__name__ in _DICTS):
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]]
    if kind is bytes:
        return ["bytes", value.hex()]
    if kind is complex:
        return ["complex", [value.real, value.imag]]
    raise Uncrossable(describe_type(value))


def describe_type(value):
    """What a value that does not cross is, by its real type (`type()`, which a `__class__` property
    cannot change): "a Weird (a subclass of float)", "a function (code)", "a generator"."""
    kind = type(value)
    plain = next((base.__name__ for base in kind.__mro__[1:] if base in _PLAIN), None)
    if plain is not None:
        return f"a {kind.__name__} (a subclass of {plain})"
    if callable(value) and not isinstance(value, type):
        return f"a {kind.__name__} (code)"
    return f"a {kind.__name__}"


_PLAIN = (bool, int, float, str, list, tuple, dict, set, frozenset, bytes, complex)


def decode(data, depth=0):
    """What `encode` made, as builtin values only; anything else raises Uncrossable."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if depth > MAX_DEPTH or type(data) is not list or len(data) != 2 or type(data[0]) is not str:
        raise Uncrossable("not a plain value")
    tag, payload = data
    try:
        if tag in ("list", "tuple", "set", "frozenset") and type(payload) is list:
            items = [decode(item, depth + 1) for item in payload]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "dict" and type(payload) is list:
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in payload}
        if tag == "bytes" and type(payload) is str:
            return bytes.fromhex(payload)
        if tag == "complex" and type(payload) is list and all(type(x) in (int, float) for x in payload):
            return complex(*payload)
    except (TypeError, ValueError) as error:  # an unhashable key, a pair that is not a pair, bad hex
        raise Uncrossable(f"not a plain value ({type(error).__name__})") from None
    raise Uncrossable("not a plain value")


# ----- messages -----

class Link:
    """One JSON object a line, each way; reading never holds more than MAX_MESSAGE bytes."""

    def __init__(self, read_fd=LINK_READ, write_fd=LINK_WRITE):
        self.read_fd, self.write_fd, self.buffer = read_fd, write_fd, b""

    def send(self, message):
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        while data:
            data = data[os.write(self.write_fd, data):]

    def receive(self):
        """The next message (a dict), or None at the end of the peer's output."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_MESSAGE:
                raise Uncrossable(f"a message over {MAX_MESSAGE} bytes")
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            raise Uncrossable("a message that is not JSON") from None
        if type(message) is not dict:
            raise Uncrossable("a message that is not an object")
        return message


def error_message(error):
    try:
        return str(error)
    except BaseException:
        return "(its message could not be read)"


def error_text(error):
    """As the one-script runner said it: "AssertionError[: message]", else "Type: message"."""
    name, message = type(error).__name__, error_message(error)
    if isinstance(error, AssertionError):
        return name + (f": {message}" if message else "")
    return f"{name}: {message}"


# ----- the program's side -----

def serve_program(program):
    """Run the program, say whether it ran, then answer the tests' requests until they end."""
    link = Link()
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(program, "<program>", "exec"), namespace)
    except BaseException as error:  # SystemExit too: a program that ends itself is a failed one
        link.send({"failed": error_text(error)})
        return "the program failed"
    link.send({"ready": True})
    while (request := link.receive()) is not None:
        if request.get("op") == "names":
            link.send({"names": _offer(namespace, request.get("names"))})
        else:
            link.send(_call(namespace, request))
    return "served"


def _offer(namespace, names):
    """What the program has of the names the tests use: a function to call, a module to import by
    name, or a plain value; anything else is left out (the tests then find no such name)."""
    offered = {}
    for name in names if type(names) is list else []:
        if type(name) is not str or name.startswith("__") or name not in namespace:
            continue
        value = namespace[name]
        if type(value) is type(os):
            offered[name] = ["module", value.__name__]
        elif callable(value):
            offered[name] = ["callable"]
        else:
            try:
                offered[name] = ["value", encode(value)]
            except (Uncrossable, RecursionError):
                continue
    return offered


def _call(namespace, request):
    try:
        function = namespace[request["name"]]
        args, kwargs = decode(request["args"]), decode(request["kwargs"])
        value = function(*args, **kwargs)
    except BaseException as error:
        return {"raised": [type(error).__name__, error_message(error)]}
    try:
        return {"value": encode(value)}
    except (Uncrossable, RecursionError) as why:
        return {"refused": str(why)}


# ----- the tests' side -----

class Boundary:
    """The tests' end of the link, and the first thing that went wrong across it: the verdict fails
    with it even where the tests caught the exception it raised (`except Exception: pass`)."""

    def __init__(self, link):
        self.link, self.broken = link, None

    def fail(self, reason):
        self.broken = self.broken or reason
        return Uncrossable(reason)

    def ask(self, message, about):
        """The program's answer to `message`; a dead program or a reply that is not one fails."""
        if self.broken is not None:  # after a failure nothing more is asked: the verdict is made
            raise Uncrossable(self.broken)
        try:
            self.link.send(message)
            reply = self.link.receive()
        except (OSError, Uncrossable) as error:
            raise self.fail(f"the program's process broke the link during {about}: {error}") from None
        if reply is None:
            raise self.fail(f"the program's process ended during {about}")
        return reply


def stand_in(boundary, name):
    """What the tests call in place of the program's function `name`."""

    def call(*args, **kwargs):
        about = f"{name}({_shown(args, kwargs)})"
        try:
            request = {"op": "call", "name": name, "args": encode(list(args)), "kwargs": encode(kwargs)}
        except (Uncrossable, RecursionError) as why:
            raise boundary.fail(f"the tests passed {about} a value that cannot cross to the program: "
                                f"{why}") from None
        reply = boundary.ask(request, about)
        if "value" in reply:
            try:
                return decode(reply["value"])
            except (Uncrossable, RecursionError) as why:
                raise boundary.fail(f"{about} returned {why}") from None
        if "raised" in reply:
            raise _raised(boundary, about, reply["raised"])
        reason = reply.get("refused") if type(reply.get("refused")) is str else "not a plain value"
        raise boundary.fail(f"{about} returned {reason[:200]}, which cannot cross to the tests (only plain "
                            f"values do)")

    call.__name__ = call.__qualname__ = name
    return call


def _shown(args, kwargs):
    try:
        text = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    except Exception:
        text = "..."
    return text if len(text) <= 60 else text[:57] + "..."


def _raised(boundary, about, raised):
    """The exception the program's function raised, rebuilt on this side: a builtin exception type
    by its name, with its message; any other name is a RuntimeError that says it; an exit (SystemExit,
    KeyboardInterrupt, ...) fails the tests whatever they catch."""
    if type(raised) is not list or len(raised) != 2 or not all(type(x) is str for x in raised):
        return boundary.fail(f"{about}: the program's process answered with something that is not one")
    name, message = raised[0][:100], raised[1][:1000]
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, BaseException) and not issubclass(kind, Exception):
        return boundary.fail(f"{about} raised {name}" + (f": {message}" if message else ""))
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(message) if message else kind()
        except Exception:
            pass
    return RuntimeError(f"{name}: {message}")


def names_used(code):
    """Every global name the tests' code (its functions and classes too) may look up."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if type(constant) is type(code):
            names |= names_used(constant)
    return names


def run_tests(tests):
    """The verdict: "passed", or "failed: <why>"."""
    import importlib

    code = compile(tests, "<tests>", "exec")
    boundary = Boundary(Link())
    try:
        first = boundary.link.receive()
    except Uncrossable as why:
        return f"failed: the program's process said {why}"
    if first is None:
        return "failed: the program's process ended before the tests ran"
    if "ready" not in first:
        said = first.get("failed")
        return "failed: " + (said if type(said) is str else "the program failed")[:300]
    wanted = sorted(name for name in names_used(code) if not hasattr(builtins, name))
    namespace = {"__name__": "__main__"}
    try:
        offered = boundary.ask({"op": "names", "names": wanted}, "the tests' start")["names"]
        for name in wanted:
            kind = offered.get(name) if type(offered) is dict else None
            if kind == ["callable"]:
                namespace[name] = stand_in(boundary, name)
            elif type(kind) is list and len(kind) == 2 and kind[0] == "module" and type(kind[1]) is str:
                namespace[name] = importlib.import_module(kind[1])
            elif type(kind) is list and len(kind) == 2 and kind[0] == "value":
                namespace[name] = decode(kind[1])
        exec(code, namespace)
    except BaseException as error:
        return "failed: " + (boundary.broken or error_text(error))
    return "failed: " + boundary.broken if boundary.broken else "passed"
