"""Never imported at run time: mypy (strict, over the whole package) checks here that each
source kind module is a ``SourceKind``, so a kind missing a member, or with another
signature, fails ``make lint``. A new kind adds its module to ``KINDS``;
``tests/unit/test_source_kinds.py`` checks that every scheme's module is listed."""

from __future__ import annotations

from sluice.capture.chain import capture as chain_kind
from sluice.capture.mysql import capture as mysql_kind
from sluice.capture.postgres import capture as postgres_kind
from sluice.capture.query import capture as query_kind
from sluice.capture.source import SourceKind

KINDS: tuple[SourceKind, ...] = (mysql_kind, postgres_kind, query_kind, chain_kind)
