"""Row filters for ``sluice sink``: a small SQL-like condition language, parsed by hand
(a tokenizer and a recursive-descent parser, never Python's ``eval``) into closures once,
then evaluated per event.

Language::

    condition  := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | "(" or ")" | predicate
    predicate  := value op value                      op: = == != <> < <= > >=
                | value "is" ["not"] "null"
                | value ["not"] "in" "(" literal ("," literal)* ")"
                | value ["not"] "like" 'pattern'
    value      := column | @meta | literal
    literal    := 'string' | number | true | false | null

- Keywords and ``@names`` are case-insensitive; ``or`` binds loosest, then ``and``, then
  ``not``, then comparisons: ``not a = 1 or b = 2 and c = 3`` is
  ``(not (a = 1)) or ((b = 2) and (c = 3))``. Either side of a comparison may be a column.
- Columns: ``status``, ``_id2`` (``[A-Za-z_][A-Za-z0-9_]*``, case-sensitive), or quoted
  ``"odd name"`` (``""`` is a quote inside; quote a column named like a keyword: ``"in"``).
- Metadata: ``@op`` (``'c' 'u' 'd' 'r' 't'``), ``@source``, ``@db``, ``@table``, ``@scn``.
- Strings: ``'it''s'`` (``''`` is a quote). Numbers: ``42``, ``-3``, ``12.50``, ``1e3``.
- ``like``: ``%`` matches any run of characters, ``_`` exactly one, ``\\`` makes the next
  character literal (``'100\\%'``); case-sensitive, the whole value must match.

Semantics are SQL's three-valued logic: a missing column or a None value is NULL; a
comparison with NULL is unknown; ``not`` unknown is unknown; ``unknown and false`` is false,
``unknown or true`` is true; a row passes only when the condition is true. ``in`` is true
when some literal equals the value, else unknown if the value or a literal is NULL.

Values compare only with their own kind, or the comparison is unknown (never an error):
- numbers (int, float, ``Decimal``) compare exactly by value: floats go through
  ``Decimal(str(x))``, so ``amount > 100`` works on ``Decimal('100.50')``; NaN is unknown;
- strings compare ordinally (by code point). A numeric string is NOT a number:
  ``'100' = 100`` is unknown, as is ``code = 7`` when ``code`` holds ``'7'``;
- booleans compare with ``true``/``false``; a bool is not a number (``true = 1`` is unknown);
- lists (SET columns) and dicts (JSON columns) take ``=``, ``!=`` and ``is null`` only;
- other values (bytes, datetimes) compare with values of the same Python type.

Limits: 4096 characters, nesting 64 deep (parentheses and ``not``s). A bad filter raises
``ConfigError`` with one line naming the problem and its 1-based position.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn

from sluice.errors import ConfigError

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "META_NAMES", "Expression", "parse_filter"]

MAX_LENGTH = 4096
MAX_DEPTH = 64
META_NAMES = ("op", "source", "db", "table", "scn")

Row = Mapping[str, Any]
Truth = bool | None  # None: unknown
Pred = Callable[[Row, Row], Truth]
Value = tuple[str, Any]  # (kind, value); None for NULL
Get = Callable[[Row, Row], Value | None]

_KEYWORDS = frozenset({"and", "or", "not", "in", "is", "like"})
_WORD_LITERALS: dict[str, Value | None] = {
    "true": ("bool", True),
    "false": ("bool", False),
    "null": None,
}
_ORDERED = frozenset({"num", "str", "bool", "bytes", "date", "datetime", "time", "timedelta"})
_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<num>-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
    |(?P<word>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<meta>@[A-Za-z_][A-Za-z0-9_]*)
    |(?P<str>'(?:[^']|'')*+')
    |(?P<qname>"(?:[^"]|"")*+")
    |(?P<op><>|<=|>=|!=|==|=|<|>)
    |(?P<punct>[(),])""",
    re.VERBOSE | re.ASCII,
)
_WORD_CHAR = re.compile(r"[A-Za-z0-9_.]", re.ASCII)
_UNTERMINATED = {"'": "unterminated string", '"': "unterminated quoted column name"}


@dataclass(frozen=True, slots=True)
class Expression:
    """A parsed filter: ``matches`` is True only when the condition is true for the event."""

    text: str
    names: frozenset[str]  # the columns it refers to
    _pred: Pred = field(repr=False, compare=False)

    def matches(self, row: Mapping[str, Any], meta: Mapping[str, Any]) -> bool:
        return self._pred(row, meta) is True


def parse_filter(text: str) -> Expression:
    """Parse ``text``; raise ``ConfigError`` (one line, with the position) when it is bad."""
    if len(text) > MAX_LENGTH:
        raise _error(text, f"longer than {MAX_LENGTH} characters", MAX_LENGTH)
    parser = _Parser(text)
    pred = parser.parse()
    return Expression(text, frozenset(parser.names), pred)


# -- values and their comparisons ------------------------------------------------------------
def _norm(value: Any) -> Value | None:
    if value is None:
        return None
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float | Decimal):
        number = Decimal(str(value)) if isinstance(value, float) else value
        nan = isinstance(number, Decimal) and number.is_nan()
        return ("nan" if nan else "num", number)
    if isinstance(value, list | tuple):
        return ("list", list(value))
    return (type(value).__name__, value)


def _equal(a: Value | None, b: Value | None, want: bool) -> Truth:
    if a is None or b is None or a[0] != b[0] or a[0] == "nan":
        return None
    return bool(a[1] == b[1]) is want


def _order(test: Callable[[Any, Any], Any], a: Value | None, b: Value | None) -> Truth:
    if a is None or b is None or a[0] != b[0] or a[0] not in _ORDERED:
        return None
    try:
        return bool(test(a[1], b[1]))
    except TypeError:  # e.g. naive vs aware datetimes
        return None


def _like_regex(pattern: str) -> re.Pattern[str]:
    """SQL LIKE as a regex whose run time stays O(len(value) * len(pattern)): the segments
    between ``%``s have fixed lengths, so each middle one is placed at its first fit,
    atomically (no backtracking into it)."""
    parts = [""]
    chars = iter(pattern)
    for char in chars:
        if char == "%":
            parts.append("")
        elif char == "_":
            parts[-1] += "."
        else:
            parts[-1] += re.escape(next(chars, "\\") if char == "\\" else char)
    middle = "".join(f"(?>.*?{part})" for part in parts[1:-1])
    source = parts[0] if len(parts) == 1 else f"{parts[0]}{middle}.*{parts[-1]}"
    return re.compile(source, re.DOTALL)


# -- closures --------------------------------------------------------------------------------
def _lookup(name: str, in_meta: bool) -> Get:
    if in_meta:
        return lambda row, meta: _norm(meta.get(name))
    return lambda row, meta: _norm(row.get(name))


def _constant(value: Value | None) -> Get:
    return lambda row, meta: value


def _comparison(op: str, left: Get, right: Get) -> Pred:
    if op in ("=", "==", "!=", "<>"):
        want = op in ("=", "==")
        return lambda row, meta: _equal(left(row, meta), right(row, meta), want)
    test = _ORDER[op]
    return lambda row, meta: _order(test, left(row, meta), right(row, meta))


def _is_null(get: Get, negate: bool) -> Pred:
    return lambda row, meta: (get(row, meta) is None) is not negate


def _member(get: Get, options: tuple[Value | None, ...]) -> Pred:
    def pred(row: Row, meta: Row) -> Truth:
        value = get(row, meta)
        result: Truth = False
        for option in options:
            hit = _equal(value, option, True)
            if hit:
                return True
            result = result if hit is False else None
        return result

    return pred


def _like(get: Get, pattern: str) -> Pred:
    fullmatch = _like_regex(pattern).fullmatch

    def pred(row: Row, meta: Row) -> Truth:
        value = get(row, meta)
        return fullmatch(value[1]) is not None if value and value[0] == "str" else None

    return pred


def _not(pred: Pred) -> Pred:
    def negated(row: Row, meta: Row) -> Truth:
        value = pred(row, meta)
        return None if value is None else not value

    return negated


def _junction(preds: list[Pred], decisive: bool) -> Pred:
    """``and`` (decisive False: one false decides) or ``or`` (one true decides)."""
    if len(preds) == 1:
        return preds[0]
    parts = tuple(preds)

    def pred(row: Row, meta: Row) -> Truth:
        result: Truth = not decisive
        for part in parts:
            value = part(row, meta)
            if value is decisive:
                return decisive
            if value is None:
                result = None
        return result

    return pred


# -- tokens and the parser -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # kw, name, meta, lit, op, punct, end
    value: Any  # kw: lower-case word; name/meta: the name; lit: its Value; op/punct: text
    pos: int  # 0-based
    text: str  # as written

    def show(self) -> str:
        text = _printable(self.text, 30)
        return text if self.kind == "lit" and text.startswith("'") else f"'{text}'"


def _printable(text: str, limit: int) -> str:
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _error(text: str, problem: str, pos: int) -> ConfigError:
    return ConfigError(f'filter "{_printable(text, 80)}": {problem} at position {pos + 1}')


def _tokens(text: str) -> Iterator[_Token]:
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            char = text[pos]
            problem = _UNTERMINATED.get(char, f"unexpected character '{_printable(char, 1)}'")
            raise _error(text, problem, pos)
        kind, raw = m.lastgroup or "", m.group()
        if kind == "num" and _WORD_CHAR.match(text, m.end()):
            raise _error(text, "malformed number", pos)
        if kind != "ws":
            yield _token(text, kind, raw, pos)
        pos = m.end()
    yield _Token("end", None, pos, "")


def _token(text: str, kind: str, raw: str, pos: int) -> _Token:
    if kind == "word":
        word = raw.lower()
        if word in _WORD_LITERALS:
            return _Token("lit", _WORD_LITERALS[word], pos, raw)
        return _Token("kw", word, pos, raw) if word in _KEYWORDS else _Token("name", raw, pos, raw)
    if kind == "meta":
        if raw[1:].lower() not in META_NAMES:
            known = ", ".join("@" + name for name in META_NAMES)
            raise _error(text, f"unknown metadata name {raw!r} (known: {known})", pos)
        return _Token("meta", raw[1:].lower(), pos, raw)
    if kind == "str":
        return _Token("lit", ("str", raw[1:-1].replace("''", "'")), pos, raw)
    if kind == "qname":
        if raw == '""':
            raise _error(text, "empty quoted column name", pos)
        return _Token("name", raw[1:-1].replace('""', '"'), pos, raw)
    if kind == "num":
        return _Token("lit", ("num", _number(text, raw, pos)), pos, raw)
    return _Token(kind, raw, pos, raw)


def _number(text: str, raw: str, pos: int) -> int | Decimal:
    try:
        return int(raw) if raw.lstrip("-").isdigit() else Decimal(raw)
    except (ValueError, InvalidOperation):
        raise _error(text, f"number out of range '{_printable(raw, 30)}'", pos) from None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(_tokens(text))
        self.at = 0
        self.depth = 0
        self.names: set[str] = set()

    def parse(self) -> Pred:
        pred = self.either()
        if self.peek().kind != "end":
            self.fail("the end of the filter")
        return pred

    def either(self) -> Pred:
        return self.chain("or", self.both, True)

    def both(self) -> Pred:
        return self.chain("and", self.negation, False)

    def chain(self, word: str, parse: Callable[[], Pred], decisive: bool) -> Pred:
        preds = [parse()]
        while self.keyword(word):
            preds.append(parse())
        return _junction(preds, decisive)

    def negation(self) -> Pred:
        if self.keyword("not"):
            return _not(self.nested(self.negation))
        if self.peek().text == "(":
            self.at += 1
            pred = self.nested(self.either)
            self.expect(")")
            return pred
        return self.predicate(self.value("a value"))

    def nested(self, parse: Callable[[], Pred]) -> Pred:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _error(self.text, f"nested deeper than {MAX_DEPTH} levels", self.peek().pos)
        pred = parse()
        self.depth -= 1
        return pred

    def predicate(self, left: Get) -> Pred:
        token = self.take()
        if token.kind == "op":
            return _comparison(token.text, left, self.value("a value"))
        if token.kind == "kw" and token.value == "is":
            negate = self.keyword("not")
            self.expect("null")
            return _is_null(left, negate)
        negate = token.kind == "kw" and token.value == "not"
        token = self.take() if negate else token
        if token.kind == "kw" and token.value == "in":
            pred = _member(left, self.literals())
        elif token.kind == "kw" and token.value == "like":
            pred = _like(left, self.pattern())
        else:
            self.fail("'in' or 'like'" if negate else "a comparison, 'is', 'in' or 'like'", token)
        return _not(pred) if negate else pred

    def value(self, what: str) -> Get:
        token = self.take()
        if token.kind == "name":
            self.names.add(token.value)
        if token.kind in ("name", "meta"):
            return _lookup(token.value, token.kind == "meta")
        if token.kind == "lit":
            return _constant(token.value)
        return self.fail(what, token)

    def literals(self) -> tuple[Value | None, ...]:
        self.expect("(")
        options = [self.literal()]
        while self.peek().text == ",":
            self.at += 1
            options.append(self.literal())
        self.expect(")")
        return tuple(options)

    def literal(self) -> Value | None:
        token = self.take()
        if token.kind != "lit":
            self.fail("a literal", token)
        value: Value | None = token.value
        return value

    def pattern(self) -> str:
        token = self.take()
        if token.kind != "lit" or token.value is None or token.value[0] != "str":
            self.fail("a 'pattern' string", token)
        return str(token.value[1])

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += token.kind != "end"
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek()
        found = token.kind == "kw" and token.value == word
        self.at += found
        return found

    def expect(self, text: str) -> None:
        if self.peek().text.lower() != text:
            self.fail(f"'{text}'")
        self.at += 1

    def fail(self, what: str, token: _Token | None = None) -> NoReturn:
        token = token or self.peek()
        problem = f"expected {what}"
        before = [t for t in self.tokens if t.pos < token.pos]
        if before:
            problem += f" after {before[-1].show()}"
        if token.kind != "end":
            problem += f", got {token.show()}"
        if token.kind == "kw" and what == "a value":
            problem += f' (quote a column named {token.value}: "{token.value}")'
        raise _error(self.text, problem, token.pos)
