"""Rates over the last minutes from a growing counter, for consoles and progress: pure, no I/O.

The owner notes its counter (events captured, rows written) whenever it changes, at most once
per step in effect; the history answers "how many per second, step by step, for the last
minutes". A step with no note had no change: its rate is 0, not a gap.
"""

from __future__ import annotations

from collections import deque

STEP_S = 5
KEEP_S = 600


class CounterHistory:
    """The last value of a counter (and a mark beside it, such as an SCN) in each ``step_s``
    bucket, for the last ``keep_s`` seconds."""

    def __init__(self, step_s: int = STEP_S, keep_s: int = KEEP_S) -> None:
        if step_s <= 0 or keep_s < step_s:
            raise ValueError("step_s must be > 0 and keep_s >= step_s")
        self.step_s = step_s
        self._buckets = keep_s // step_s
        self._samples: deque[tuple[int, int, int]] = deque()  # (bucket, value, mark)

    def note(self, now: float, value: int, mark: int = 0) -> None:
        bucket = int(now // self.step_s)
        samples = self._samples
        if samples and samples[-1][0] >= bucket:
            samples[-1] = (samples[-1][0], value, mark)
        else:
            samples.append((bucket, value, mark))
        while samples and samples[0][0] < bucket - self._buckets:
            samples.popleft()

    def rates(self, now: float) -> list[tuple[int, float]]:
        """``(bucket start, epoch s; per second)`` of each step from the oldest note on, up
        to the last whole step before ``now`` (the one under way would read low)."""
        if not self._samples:
            return []
        last_bucket = int(now // self.step_s)
        out: list[tuple[int, float]] = []
        samples = iter(self._samples)
        bucket, value, _mark = next(samples)
        pending = next(samples, None)
        for b in range(bucket + 1, last_bucket):
            previous = value
            if pending is not None and pending[0] == b:
                value = pending[1]
                pending = next(samples, None)
            out.append((b * self.step_s, max(0, value - previous) / self.step_s))
        return out

    def since(self, now: float, seconds: float) -> tuple[int, int, float] | None:
        """``(mark, counter growth since, seconds since)`` of the newest note at least
        ``seconds`` before ``now`` (its bucket's end stands for when); None when the history
        is younger."""
        limit = int((now - seconds) // self.step_s)
        found = None
        for bucket, value, mark in self._samples:
            if bucket > limit:
                break
            found = (mark, value, bucket)
        if found is None:
            return None
        mark, value, bucket = found
        return mark, self._samples[-1][1] - value, now - (bucket + 1) * self.step_s
