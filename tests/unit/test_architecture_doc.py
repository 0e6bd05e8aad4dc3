"""docs/architecture.md names modules by path (``relay/cold.py``, ``capture/mysql/scn.py``) and
by dotted name (``sluice.spark.arrowrows``): each must exist, so the page cannot describe code
that moved or was removed without this failing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "sluice"
DOC = ROOT / "docs" / "architecture.md"
_CODE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"(?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_]+\.py")
_DOTTED = re.compile(r"sluice(?:\.[a-z_][a-z0-9_]*)+")
_DEFINED = r"^(?:def|class|async def) {0}\b|^{0}(?:: [^=]+)? = "


def _spans() -> list[str]:
    return _CODE.findall(DOC.read_text("utf-8"))


_TREES = ("src", "tests", "benchmarks", "interop")


def _path_exists(path: str) -> bool:
    """Under src/sluice or the repository; a bare or partial path (``seed/chunk.py`` in the
    row of ``bootstrap/seed/``, ``test_seed.py``) must end the path of some file of the
    package, its tests, benchmarks or interop."""
    if (PACKAGE / path).is_file() or (ROOT / path).is_file():
        return True
    return any(
        str(found).endswith("/" + path) for tree in _TREES for found in (ROOT / tree).rglob("*.py")
    )


def _module(parts: list[str]) -> Path | None:
    base = PACKAGE.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _dotted_exists(name: str) -> bool:
    """A module, or a name a module defines (``sluice.capture.source.open_capture``)."""
    parts = name.split(".")[1:]
    if not parts or _module(parts) is not None:
        return True
    parent = _module(parts[:-1]) if len(parts) > 1 else PACKAGE / "__init__.py"
    if parent is None:
        return False
    pattern = re.compile(_DEFINED.format(re.escape(parts[-1])), re.MULTILINE)
    return bool(pattern.search(parent.read_text("utf-8")))


def test_the_page_names_module_paths() -> None:
    paths = {m.group(0) for span in _spans() for m in _PATH.finditer(span)}
    assert {"relay/cold.py", "capture/mysql/scn.py"} <= paths  # the checks see them
    missing = sorted(p for p in paths if not _path_exists(p))
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_the_page_names_modules_that_exist() -> None:
    names = {m.group(0) for span in _spans() for m in _DOTTED.finditer(span)}
    missing = sorted(n for n in names if not _dotted_exists(n))
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_a_missing_module_is_found() -> None:
    assert not _path_exists("relay/no_such_module.py")
    assert not _dotted_exists("sluice.spark.no_such_module")
    assert _dotted_exists("sluice.spark.arrowrows") and _path_exists("seed/chunk.py")
