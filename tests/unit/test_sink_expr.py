"""The sink's row-filter language: operators, SQL's three-valued logic, exact numbers, LIKE,
and one-line errors with positions for every way a filter can be wrong."""

from __future__ import annotations

import datetime as dt
import re
import time
from decimal import Decimal
from functools import cache
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.errors import ConfigError
from sluice.sink.expr import MAX_DEPTH, MAX_LENGTH, Expression, parse_filter

META = {"op": "u", "source": "shop.orders", "db": "shop", "table": "orders", "scn": 42}


def holds(text: str, row: dict[str, Any], meta: dict[str, Any] = META) -> bool:
    return parse_filter(text).matches(row, meta)


def truth(text: str, row: dict[str, Any] | None = None) -> bool | None:
    """The three-valued result: True, False, or None when neither it nor its negation holds."""
    row = row or {}
    if holds(text, row):
        return True
    return False if holds(f"not ({text})", row) else None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n = 5", True),
        ("n == 5", True),
        ("n = 6", False),
        ("n != 6", True),
        ("n <> 5", False),
        ("n < 6", True),
        ("n < 5", False),
        ("n <= 5", True),
        ("n > 4", True),
        ("n > 5", False),
        ("n >= 5", True),
        ("5 = n", True),
        ("s = 'abc'", True),
        ("s < 'abd'", True),
        ("s > 'ab'", True),
        ("s = 'ABC'", False),
        ("s = m", False),
        ("n < k", True),
        ("k = 10", True),
        ("flag = true", True),
        ("flag != false", True),
        ("flag = false", False),
    ],
)
def test_comparisons(text: str, expected: bool) -> None:
    assert truth(text, {"n": 5, "k": 10, "s": "abc", "m": "abd", "flag": True}) is expected


def test_strings_compare_by_code_point() -> None:
    assert holds("s < 'a'", {"s": "Z"})
    assert holds("s > 'z'", {"s": "é"})
    assert holds("s = 'it''s'", {"s": "it's"})
    assert holds("s = ''", {"s": ""})


@pytest.mark.parametrize(
    ("text", "row"),
    [
        ("amount > 100", {"amount": Decimal("100.50")}),
        ("amount > 100", {"amount": 101}),
        ("amount = 100.5", {"amount": Decimal("100.50")}),
        ("amount = 100.50", {"amount": 100.5}),
        ("amount = 0.1", {"amount": 0.1}),
        ("amount < 0.30", {"amount": 0.1 + 0.1}),
        ("amount = 1e3", {"amount": 1000}),
        ("amount = 1000", {"amount": Decimal("1E+3")}),
        ("amount = -3", {"amount": -3}),
        ("amount < -2.5", {"amount": Decimal("-3")}),
        ("amount = .5", {"amount": Decimal("0.5")}),
        ("amount = 5.", {"amount": 5}),
        ("amount = other", {"amount": 2, "other": Decimal("2.0")}),
        ("amount > 12345678901234567890", {"amount": 12345678901234567891}),
        ("amount < 9007199254740993", {"amount": Decimal("9007199254740992.5")}),
        ("amount > 1e999999", {"amount": float("inf")}),
    ],
)
def test_numbers_compare_exactly_across_int_float_and_decimal(
    text: str, row: dict[str, Any]
) -> None:
    assert truth(text, row) is True


@pytest.mark.parametrize(
    ("text", "row"),
    [
        ("code = 7", {"code": "7"}),  # a numeric string is not a number
        ("code > 1", {"code": "7"}),
        ("code = '7'", {"code": 7}),
        ("flag = 1", {"flag": True}),  # a bool is not a number
        ("flag = true", {"flag": 1}),
        ("flag > 0", {"flag": True}),
        ("x = 1", {"x": float("nan")}),
        ("x != 1", {"x": float("nan")}),
        ("x < 1", {"x": Decimal("NaN")}),
        ("x > 1", {"x": Decimal("sNaN")}),
        ("x = y", {"x": float("nan"), "y": float("nan")}),
        ("tags < 'a'", {"tags": ["a", "b"]}),
        ("doc > 'a'", {"doc": {"a": 1}}),
        ("tags = 'a'", {"tags": ["a"]}),
        ("when > '2024-01-01'", {"when": dt.date(2024, 5, 1)}),
        ("a < b", {"a": dt.datetime(2024, 1, 1), "b": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}),
        ("a < b", {"a": {1}, "b": {1, 2}}),  # sets have no order here (not subset)
        ("a = b", {"a": dt.date(2024, 1, 1), "b": dt.datetime(2024, 1, 1)}),
    ],
)
def test_incompatible_values_compare_unknown_never_raise(text: str, row: dict[str, Any]) -> None:
    assert truth(text, row) is None


def test_lists_dicts_and_other_values_of_one_kind() -> None:
    row = {"tags": ["a", "b"], "same": ("a", "b"), "doc": {"k": [1]}, "twin": {"k": [1]}}
    assert truth("tags = same", row) is True
    assert truth("doc = twin", row) is True
    assert truth("doc != tags", row) is None
    assert truth("tags is not null and doc is not null", row) is True
    assert truth("a < b", {"a": b"\x00", "b": b"\x01"}) is True
    assert truth("a < b", {"a": dt.date(2024, 1, 1), "b": dt.date(2024, 1, 2)}) is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("missing = 1", None),
        ("none = 1", None),
        ("none != 1", None),
        ("1 = null", None),
        ("null = null", None),
        ("not none = 1", None),
        ("none = 1 and 1 = 2", False),
        ("1 = 2 and none = 1", False),
        ("none = 1 and 1 = 1", None),
        ("none = 1 or 1 = 1", True),
        ("1 = 1 or none = 1", True),
        ("none = 1 or 1 = 2", None),
        ("none is null", True),
        ("missing is null", True),
        ("zero is null", False),
        ("empty is not null", True),
        ("none is not null", False),
        ("none like '%'", None),
        ("none in (1, 2)", None),
        ("none not in (1, 2)", None),
    ],
)
def test_null_is_unknown_with_three_valued_logic(text: str, expected: bool | None) -> None:
    assert truth(text, {"none": None, "zero": 0, "empty": ""}) is expected


@st.composite
def conditions(draw: st.DrawFn, depth: int = 3) -> tuple[str, bool | None]:
    """Random conditions with their Kleene truth on ``{"t": 1, "f": 0}``."""
    atoms = [("t = 1", True), ("f = 1", False), ("u = 1", None), ("t != 0", True)]
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(atoms))
    kind = draw(st.sampled_from(["and", "or", "not"]))
    a_text, a = draw(conditions(depth - 1))
    if kind == "not":
        return f"not ({a_text})", None if a is None else not a
    b_text, b = draw(conditions(depth - 1))
    if kind == "and":
        value = False if False in (a, b) else None if None in (a, b) else True
    else:
        value = True if True in (a, b) else None if None in (a, b) else False
    return f"({a_text}) {kind.upper()} ({b_text})", value


@given(conditions())
def test_kleene_logic_on_random_conditions(condition: tuple[str, bool | None]) -> None:
    text, expected = condition
    assert truth(text, {"t": 1, "f": 0}) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("t = 1 or t = 1 and f = 1", True),  # or < and
        ("(t = 1 or t = 1) and f = 1", False),
        ("f = 1 and t = 1 or t = 1", True),
        ("not f = 1 and t = 1", True),  # not binds tighter than and
        ("not (f = 1 or t = 1)", False),
        ("not f = 1 or f = 1", True),
        ("not not t = 1", True),
        ("NOT t = 1 OR t = 1 AND NOT f = 1", True),
        ("f = 1 or f = 1 or f = 1 or t = 1", True),
        ("t = 1 and t = 1 and t = 1 and f = 1", False),
    ],
)
def test_precedence(text: str, expected: bool) -> None:
    assert truth(text, {"t": 1, "f": 0}) is expected


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("ab%", "abc", True),
        ("ab%", "ab", True),
        ("ab%", "xab", False),
        ("%ab", "xxab", True),
        ("%b%", "abc", True),
        ("a_c", "abc", True),
        ("a_c", "ac", False),
        ("a_c", "abbc", False),
        ("a%c%e", "abcde", True),
        ("a%c%e", "aced", False),
        ("%", "", True),
        ("_", "", False),
        ("", "", True),
        ("a.c", "abc", False),  # regex characters are plain characters
        ("a.c", "a.c", True),
        ("a*", "aaa", False),
        ("a*", "a*", True),
        ("(x)", "(x)", True),
        ("[ab]", "a", False),
        ("^a$|b", "^a$|b", True),
        ("a\\%", "a%", True),  # a backslash makes the next character plain
        ("a\\%", "ab", False),
        ("a\\_b", "a_b", True),
        ("a\\_b", "axb", False),
        ("a\\\\b", "a\\b", True),
        ("a\\", "a\\", True),
        ("a%z", "a\nb\nz", True),  # % and _ match newlines too
        ("a_z", "a\nz", True),
        ("AB%", "abc", False),  # case-sensitive
    ],
)
def test_like(pattern: str, value: str, expected: bool) -> None:
    text = "s like '" + pattern.replace("'", "''") + "'"
    assert truth(text, {"s": value}) is expected
    assert truth(text.replace("like", "NOT LIKE"), {"s": value}) is (not expected)


def test_like_on_non_strings_is_unknown() -> None:
    assert truth("n like '1%'", {"n": 12}) is None
    assert truth("n not like '1%'", {"n": ["1"]}) is None


def test_like_stays_fast_on_pathological_patterns() -> None:
    started = time.perf_counter()
    assert not holds("s like '" + "%a" * 1000 + "%b'", {"s": "a" * 4000})
    assert not holds("s like '" + "%_" * 1000 + "b'", {"s": "a" * 4000})
    assert time.perf_counter() - started < 2


@cache
def like_reference(pattern: str, value: str) -> bool:
    if not pattern:
        return not value
    head, rest = pattern[0], pattern[1:]
    if head == "%":
        return like_reference(rest, value) or (bool(value) and like_reference(pattern, value[1:]))
    if head == "\\":
        head, rest = (rest[0], rest[1:]) if rest else ("\\", "")
    elif head == "_":
        return bool(value) and like_reference(rest, value[1:])
    return value[:1] == head and like_reference(rest, value[1:])


@given(st.text("ab%_\\.", max_size=8), st.text("ab%_\\.\n", max_size=8))
def test_like_agrees_with_a_reference_matcher(pattern: str, value: str) -> None:
    assert holds("s like '" + pattern + "'", {"s": value}) is like_reference(pattern, value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s in ('a', 'b')", True),
        ("s in ('b')", False),
        ("s not in ('b', 'c')", True),
        ("s not in ('a')", False),
        ("n in (1, 2.0, 3)", True),
        ("n in ('2')", None),  # no coercion: unknown
        ("s in ('b', null)", None),  # SQL: no match and a NULL in the list is unknown
        ("s not in ('b', null)", None),
        ("s in ('a', null)", True),
        ("s IN (true, 'a')", True),
    ],
)
def test_in_lists(text: str, expected: bool | None) -> None:
    row = {"s": "a", "n": Decimal("2")}
    assert truth(text, row) is expected


def test_quoted_identifiers_and_names() -> None:
    row = {"odd name": 1, 'say "hi"': "x", "and": 2, "Status": "ok"}
    assert holds('"odd name" = 1', row)
    assert holds('"say ""hi""" = \'x\'', row)
    assert holds('"and" = 2', row)
    assert holds("Status = 'ok'", row)
    assert not holds("status = 'ok'", row)  # column names are case-sensitive
    expr = parse_filter("\"odd name\" = 1 and (a < b or c is null) and @op = 'u'")
    assert expr.names == frozenset({"odd name", "a", "b", "c"})
    assert expr.text == "\"odd name\" = 1 and (a < b or c is null) and @op = 'u'"


@pytest.mark.parametrize(
    "text",
    [
        "@op = 'u'",
        "@OP in ('c', 'u')",
        "@source = 'shop.orders'",
        "@db = 'shop' and @table = 'orders'",
        "@scn >= 42",
        "@scn = n",
    ],
)
def test_metadata_names(text: str) -> None:
    assert holds(text, {"n": 42})
    assert parse_filter(text).names <= {"n"}


def test_missing_metadata_is_null() -> None:
    assert not holds("@scn = 1", {}, {})
    assert not holds("not @scn = 1", {}, {})
    assert holds("@scn is null", {}, {})


def test_keywords_are_case_insensitive() -> None:
    assert holds("x Is Not Null AnD y LIKE 'a%' oR NoT z IN (1) and t = TRUE", {"x": 1, "y": "ab"})
    assert holds("n is NULL", {}) and holds("f = False", {"f": False})


def test_expression_is_a_frozen_value() -> None:
    expr = parse_filter("a = 1")
    assert isinstance(expr, Expression)
    with pytest.raises(AttributeError):
        expr.text = "b = 2"  # type: ignore[misc]
    assert expr == parse_filter("a = 1")


@pytest.mark.parametrize(
    ("text", "problem", "position"),
    [
        ("status != 'draft' and", "expected a value after 'and'", 22),
        ("", "expected a value", 1),
        ("   ", "expected a value", 4),
        ("a = ", "expected a value after '='", 5),
        ("a", "expected a comparison, 'is', 'in' or 'like' after 'a'", 2),
        ("a b", "expected a comparison, 'is', 'in' or 'like' after 'a', got 'b'", 3),
        ("a not = 1", "expected 'in' or 'like' after 'not', got '='", 7),
        ("and = 1", "got 'and' (quote a column named and: \"and\")", 1),
        ("a = or", "expected a value after '=', got 'or'", 5),
        ("a in 1", "expected '(' after 'in', got '1'", 6),
        ("a in ()", "expected a literal after '(', got ')'", 7),
        ("a in (1, b)", "expected a literal after ',', got 'b'", 10),
        ("a in (1 2)", "expected ')' after '1', got '2'", 9),
        ("a in (1", "expected ')' after '1'", 8),
        ("a like 5", "expected a 'pattern' string after 'like', got '5'", 8),
        ("a like b", "expected a 'pattern' string after 'like', got 'b'", 8),
        ("a like null", "expected a 'pattern' string after 'like', got 'null'", 8),
        ("x is nul", "expected 'null' after 'is', got 'nul'", 6),
        ("x is not 3", "expected 'null' after 'not', got '3'", 10),
        ("x is", "expected 'null' after 'is'", 5),
        ("@foo = 1", "unknown metadata name '@foo' (known: @op, @source, @db, @table, @scn)", 1),
        ("a = @", "unexpected character '@'", 5),
        ("a = 'abc", "unterminated string", 5),
        ("a = 'it''s", "unterminated string", 5),
        ('"ab = 1', "unterminated quoted column name", 1),
        ('"" = 1', "empty quoted column name", 1),
        ("a = 12abc", "malformed number", 5),
        ("a = 1.2.3", "malformed number", 5),
        ("a = 1e", "malformed number", 5),
        ("a = - 1", "unexpected character '-'", 5),
        ("a = 1 b", "expected the end of the filter after '1', got 'b'", 7),
        ("(a = 1", "expected ')' after '1'", 7),
        ("a = 1)", "expected the end of the filter after '1', got ')'", 6),
        ("()", "expected a value after '(', got ')'", 2),
        ("a $ 1", "unexpected character '$'", 3),
        ("a = 1 &&", "unexpected character '&'", 7),
        ("a = 'x' and\nb = 1 or", "expected a value after 'or'", 21),
        ("a\t=\x85", "unexpected character '\\x85'", 4),
        ("a = 1e99999999999999999999", "number out of range '1e99999999999999999999'", 5),
        ("a = ′", "unexpected character '′'", 5),
        ("a = ١", "unexpected character '١'", 5),  # non-ASCII digits are not numbers
    ],
)
def test_errors_name_the_problem_and_position(text: str, problem: str, position: int) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_filter(text)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert message.startswith('filter "')
    assert problem in message
    assert message.endswith(f" at position {position}")


def test_error_shows_long_and_multiline_text_on_one_line() -> None:
    text = "a = 1 and\n" * 20 + "b ="
    with pytest.raises(ConfigError, match=r"^filter \"a = 1 and\\na = 1") as caught:
        parse_filter(text)
    assert len(str(caught.value).splitlines()) == 1
    assert len(str(caught.value)) < 200
    assert str(caught.value).endswith(f"at position {len(text) + 1}")


def test_length_limit() -> None:
    just_fits = "a = '" + "x" * (MAX_LENGTH - 6) + "'"
    assert len(just_fits) == MAX_LENGTH
    assert holds(just_fits, {"a": "x" * (MAX_LENGTH - 6)})
    with pytest.raises(ConfigError, match=f"longer than {MAX_LENGTH} characters at position"):
        parse_filter(just_fits + " ")


@pytest.mark.parametrize(
    ("opening", "closing"),
    [("(", ")"), ("not ", ""), ("not (", ")"), ("(not ", ")")],
)
def test_depth_limit(opening: str, closing: str) -> None:
    levels = MAX_DEPTH if opening in ("(", "not ") else MAX_DEPTH // 2
    assert truth(opening * levels + "a = 1" + closing * levels, {"a": 1}) is not None
    deep = opening * 1000 + "a = 1" + closing * 1000
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_filter(deep[:MAX_LENGTH] if len(deep) > MAX_LENGTH else deep)


def test_long_flat_chains_are_not_nesting() -> None:
    text = " or ".join(f"a = {i}" for i in range(300))
    assert holds(text, {"a": 299})
    assert not holds(text, {"a": 300})


@given(st.text(max_size=200))
def test_random_text_raises_only_config_error(text: str) -> None:
    try:
        expr = parse_filter(text)
    except ConfigError as error:
        assert len(str(error).splitlines()) == 1
        assert re.search(r" at position \d+$", str(error))
        return
    for row in ({}, {"a": 1, "b": "x", "c": [1], "d": None}):
        assert isinstance(expr.matches(row, META), bool)


@given(st.text(alphabet=" ()'\"@=<>!,.-_%0129aeinorstlkuNT\\", max_size=60))
def test_filter_like_text_raises_only_config_error(text: str) -> None:
    try:
        expr = parse_filter(text)
    except ConfigError as error:
        assert len(str(error).splitlines()) == 1
        return
    rows: tuple[dict[str, Any], ...] = (
        {},
        {"a": 1, "i": "x", "e": Decimal("1.5"), "t": True, "s": ["x"], "n": None},
    )
    for row in rows:
        for name in expr.names:
            assert isinstance(name, str)
        assert isinstance(expr.matches(row, META), bool)
