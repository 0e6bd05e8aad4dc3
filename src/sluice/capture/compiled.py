"""What every kind's compiled transcoder shares: the switch that rules them out.

``SLUICE_PURE_PYTHON=1`` makes capture take the Python paths, which stay the reference (to
compare, or to rule the C code out)."""

from __future__ import annotations

import os


def pure_python_forced() -> str:
    """Why compiled paths are off by the environment ('' when they are not)."""
    if os.environ.get("SLUICE_PURE_PYTHON", "") not in ("", "0"):
        return "SLUICE_PURE_PYTHON is set"
    return ""
