"""Source names with dots, dashes, backquotes and commas: one canonical spelling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.core.names import canonical_source, source_name, split_source, split_sources
from sluice.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "parts", "canonical"),
    [
        ("shop.customer", ("shop", "customer"), "shop.customer"),
        ("`shop`.`customer`", ("shop", "customer"), "shop.customer"),
        (
            "`topic-name.sanitization-it`.`DBZ.1834`",
            ("topic-name.sanitization-it", "DBZ.1834"),
            "`topic-name.sanitization-it`.`DBZ.1834`",
        ),
        ("db.`t.2`", ("db", "t.2"), "db.`t.2`"),
        ("db.`some|test@data`", ("db", "some|test@data"), "db.`some|test@data`"),
        ("db.`a``b`", ("db", "a`b"), "db.`a``b`"),
        ("db.some|test@data", ("db", "some|test@data"), "db.`some|test@data`"),
    ],
)
def test_names_parse_to_their_parts_and_print_back_canonically(
    name: str, parts: tuple[str, str], canonical: str
) -> None:
    assert split_source(name) == parts
    assert canonical_source(name) == canonical
    assert split_source(canonical) == parts


@pytest.mark.parametrize("bad", ["shop", "shop.", ".t", "a.b.c", "`a.b", "`a`x.b", "a.`b`c"])
def test_a_name_that_is_not_db_dot_table_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"must be DB\.TABLE|unclosed backquote"):
        split_source(bad)


def test_lists_split_on_commas_outside_backquotes() -> None:
    assert split_sources("a.b, `x,y`.`t.1`,,c.d") == ["a.b", "`x,y`.`t.1`", "c.d"]
    assert split_sources("") == []


@given(st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=12))
def test_any_pair_of_parts_round_trips(db: str, table: str) -> None:
    name = source_name(db, table)
    assert split_source(name) == (db, table)
    assert split_sources(f"{name},{name}") == [name, name]
