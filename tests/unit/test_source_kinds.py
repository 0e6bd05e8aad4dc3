"""Every source kind module is a ``SourceKind``: mypy checks the modules that
``sluice.capture.kind_check`` lists; this checks that every scheme the seam knows names a
module listed there and that has every member of the protocol."""

from __future__ import annotations

import importlib
from typing import get_type_hints

from sluice.capture import kind_check, source
from sluice.capture.source import SourceKind

MEMBERS = sorted(
    {name for name in vars(SourceKind) if not name.startswith("_")}
    | set(get_type_hints(SourceKind))
)


def test_the_protocol_lists_what_the_seam_calls() -> None:
    assert MEMBERS == [
        "TAKES_TABLE_OPTIONS",
        "describe",
        "open_capture",
        "open_seeder",
        "parse_url",
        "seed_jars",
        "source_info",
    ]


def test_every_scheme_names_a_module_mypy_checks_with_every_member() -> None:
    checked = {kind.__name__ for kind in kind_check.KINDS}
    for scheme in source.known_schemes():
        module = importlib.import_module(source._KINDS[scheme])
        missing = [name for name in MEMBERS if not hasattr(module, name)]
        assert not missing, f"{scheme}:// ({module.__name__}) lacks {', '.join(missing)}"
        assert module.__name__ in checked, f"add {module.__name__} to kind_check.KINDS"
