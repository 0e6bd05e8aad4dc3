"""Helpers shared by the commands."""

from __future__ import annotations

import argparse

from sluice.core.scn import parse_scn
from sluice.errors import ConfigError


def scn_arg(text: str) -> int:
    try:
        return parse_scn(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
