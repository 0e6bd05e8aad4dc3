"""Running generated code so that it stays debuggable: each piece is compiled under its own
file name, and its text is registered with ``linecache``, so a traceback through it names
the generated file and line and shows the line."""

from __future__ import annotations

import itertools
import linecache
from collections.abc import Sequence
from typing import Any

_serial = itertools.count(1)


def run_generated(lines: Sequence[str], env: dict[str, Any], what: str) -> str:
    """Execute ``lines`` in ``env``; ``what`` says what the code is (``decoder of db.t v2``).
    Returns the file name tracebacks will show."""
    text = "\n".join(lines) + "\n"
    filename = f"<sluice generated {what} #{next(_serial)}>"
    # A cache entry without a modification time is never dropped by linecache.checkcache.
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    exec(compile(text, filename, "exec"), env)
    return filename
