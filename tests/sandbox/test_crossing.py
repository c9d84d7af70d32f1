"""What crosses between a program and its tests (harness/sandbox/crossing.py): plain values by their
exact type, and nothing a process on the other side could make into code or an object of its own."""

import json
import math
from collections import Counter, OrderedDict, defaultdict, namedtuple

import pytest

from harness.sandbox.crossing import MAX_DEPTH, Uncrossable, decode, encode, names_used

PLAIN = [None, True, False, 0, -7, 2**200, 0.1, -0.0, "text é \n", [1, [2, "x"]], (1, (2.5,), ()),
         {"a": 1, 2: [3], (1, 2): None}, {1, 2, 3}, frozenset({"a"}), b"\x00\xff", 1 + 2j, []]


@pytest.mark.parametrize("value", PLAIN, ids=repr)
def test_a_plain_value_crosses_as_an_equal_value_of_the_same_type(value):
    crossed = decode(json.loads(json.dumps(encode(value))))
    assert crossed == value and type(crossed) is type(value)


def test_floats_that_json_has_no_word_for_still_cross():
    crossed = decode(json.loads(json.dumps(encode([math.inf, -math.inf, math.nan]))))
    assert crossed[:2] == [math.inf, -math.inf] and math.isnan(crossed[2])


def test_the_standard_librarys_dicts_cross_as_dicts():
    for value in (OrderedDict(a=1), defaultdict(int, a=1), Counter("aab")):
        crossed = decode(json.loads(json.dumps(encode(value))))
        assert crossed == dict(value) and type(crossed) is dict


class AlwaysEqual(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class PosesAsFloat:
    @property
    def __class__(self):
        return float


REFUSED = [
    (AlwaysEqual(1.0), "a AlwaysEqual (a subclass of float)"),
    (type("S", (str,), {})("x"), "a S (a subclass of str)"),
    ([type("L", (list,), {})()], "a L (a subclass of list)"),
    (namedtuple("P", "x y")(1, 2), "a P (a subclass of tuple)"),
    (PosesAsFloat(), "a PosesAsFloat"),
    (lambda: 1, "a function (code)"),
    ((x for x in []), "a generator"),
    (math, "a module"),
]


@pytest.mark.parametrize(("value", "said"), REFUSED, ids=[said for _, said in REFUSED])
def test_anything_but_a_plain_value_is_refused_by_what_it_is(value, said):
    with pytest.raises(Uncrossable) as refused:
        encode(value)
    assert str(refused.value) == said


def test_values_nested_past_the_limit_are_refused_both_ways():
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(Uncrossable, match="nested deeper"):
        encode(deep)
    data = ["list", []]
    for _ in range(MAX_DEPTH + 5):
        data = ["list", [data]]
    with pytest.raises(Uncrossable):
        decode(data)


@pytest.mark.parametrize("data", [
    {"__class__": "float"}, ["float", 1.0], ["list", 5], ["dict", [[["list", []], 1]]], ["dict", [[1]]],
    ["bytes", "zz"], ["complex", ["1", 2]], ["tuple", [1], "extra"], [1, 2],
])
def test_data_that_encode_never_makes_decodes_to_nothing(data):
    with pytest.raises(Uncrossable):
        decode(data)


def test_the_tests_ask_the_program_for_every_global_name_their_code_and_functions_use():
    code = compile("import math\ndef check(candidate):\n    assert helper(candidate(1)) == [x for x in LIMIT]"
                   "\ncheck(add)\n", "<tests>", "exec")
    assert {"math", "check", "helper", "LIMIT", "add"} <= names_used(code)
