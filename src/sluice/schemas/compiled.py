"""The switch every compiled path shares (the binlog transcoder, the SQLite page reader, the
Arrow batch framer): ``SLUICE_PURE_PYTHON=1`` makes Sluice take the Python paths, which stay
each one's reference (to compare, or to rule the C code out)."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any


def pure_python_forced() -> str:
    """Why compiled paths are off by the environment ('' when they are not)."""
    if os.environ.get("SLUICE_PURE_PYTHON", "") not in ("", "0"):
        return "SLUICE_PURE_PYTHON is set"
    return ""


def load(name: str, what: str) -> tuple[ModuleType | None, str]:
    """A compiled module and '', or None and why it is missing (a build without a C compiler:
    ``optional = true`` in pyproject.toml lets the install go on without it)."""
    try:
        return importlib.import_module(name), ""
    except ImportError as exc:
        return None, f"{what} is not built ({exc}); reinstall with a C compiler (pip install -e .)"


@dataclass(frozen=True, slots=True)
class Choice:
    """A table's compiled transcoder (a kind's C ``Program``), or why the table keeps the
    Python path."""

    program: Any | None
    why: str
