"""What a long-running Sluice process (``sluice relay``, ``sluice sink``) sets for itself once
it has started: the process is the component, so what exists by then (modules, codecs, the
app) lives as long as it does."""

from __future__ import annotations

import gc

THRESHOLDS = (20_000, 50, 100)  # young collections every 20,000 allocations, not 700


def long_lived() -> tuple[int, int, int]:
    """Keep what exists now out of the cyclic collector's passes (``gc.freeze``) and make
    young collections rarer: each pass stalls every stream of a relay (benchmarks/load.py:
    a normal client's p99 under 1,200 streams 50-100 ms without, 15-19 ms with), and cost a
    sink a sixth of its CPU on 1,000-row windows (issue 40). Returns the thresholds before,
    for ``restore``."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return before


def restore(before: tuple[int, int, int]) -> None:
    """Undo ``long_lived`` (a benchmark that runs a component in its own process)."""
    gc.unfreeze()
    gc.set_threshold(*before)
