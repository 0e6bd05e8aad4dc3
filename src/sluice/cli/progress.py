"""Progress of long commands on stderr: a live bar on a terminal, plain lines otherwise.

A command feeds ``ProgressDisplay.update()`` with ``Sample`` values (how far, how many rows or
events, or a phase such as "planning"); the display works out rate and ETA (``Meter``, pure:
the caller gives the time) and draws them. On a terminal it is a ``rich`` bar redrawn a few
times a second; in a log (stderr a file or a pipe) it is one line every ``every_s`` and on a
phase change, and in both a final line with the totals::

    seed: 12/24 chunks, 1,200,000 rows, 250,000 rows/s, ETA 5 s
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TextIO

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

PLAIN_EVERY_S = 5.0


@dataclass(frozen=True, slots=True)
class Sample:
    """What a command reports. ``done`` of ``total`` steps (chunks; SCNs past the start) drive
    the bar and the ETA, ``count`` (rows, events) the rate; ``position`` says the steps in the
    command's words ("12/24 chunks"); ``phase`` ("planning", "publishing") is shown instead of
    a rate while the work being measured has not begun or is over."""

    done: int = 0
    total: int | None = None
    count: int = 0
    position: str = ""
    phase: str | None = None


class Meter:
    """Rate and ETA, measured from the first sample without a phase (so the time spent
    planning, and work resumed from an earlier run, count for nothing) until a phase comes
    back (the rate then stays as it was when the measured work ended)."""

    def __init__(self) -> None:
        self.sample = Sample(phase="starting")
        self._base: tuple[float, int, int] | None = None  # (time, done, count)
        self._ended: float | None = None

    def observe(self, sample: Sample, now: float) -> None:
        if self._base is None and sample.phase is None:
            self._base = (now, sample.done, sample.count)
        elif self._base is not None and sample.phase is not None and self._ended is None:
            self._ended = now
        self.sample = sample

    def rate(self, now: float) -> float | None:
        """Rows (events) per second; None until the first one (not "0 rows/s" for ever)."""
        if self._base is None or self.sample.count <= self._base[2]:
            return None
        return (self.sample.count - self._base[2]) / self._seconds(now)

    def eta(self, now: float) -> float | None:
        """Seconds left at the pace so far; None without a total or before the first step."""
        sample, base = self.sample, self._base
        if sample.phase is not None or sample.total is None or base is None:
            return None
        if sample.done <= base[1] or sample.done >= sample.total:
            return None
        per_s = (sample.done - base[1]) / self._seconds(now)
        return (sample.total - sample.done) / per_s

    def fraction(self) -> float | None:
        total = self.sample.total
        if total is None:
            return None
        return 1.0 if total <= 0 else min(max(self.sample.done / total, 0.0), 1.0)

    def _seconds(self, now: float) -> float:
        assert self._base is not None
        until = self._ended if self._ended is not None else now
        return max(until - self._base[0], 1e-3)


def format_rate(per_s: float, unit: str) -> str:
    """``250,000 rows/s``; a decimal only where it says something (``2.5 rows/s``)."""
    return f"{per_s:,.0f} {unit}/s" if per_s >= 10 else f"{per_s:.1f} {unit}/s"


def format_duration(seconds: float) -> str:
    """``5 s``, ``2 min 05 s``, ``1 h 02 min``: as precise as a person reads an ETA."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def describe(meter: Meter, now: float, unit: str) -> list[str]:
    """The parts of a progress line: position, count, then the rate and ETA or the phase."""
    parts = _totals(meter.sample, unit)
    word, rate = state(meter, now), meter.rate(now)
    parts.append(format_rate(rate, unit) if word is None and rate is not None else word or "")
    eta = meter.eta(now)
    if eta is not None:
        parts.append(f"ETA {format_duration(eta)}")
    return parts


def state(meter: Meter, now: float) -> str | None:
    """What is shown instead of a rate: the phase, or "starting" before the first row."""
    if meter.sample.phase is not None:
        return meter.sample.phase
    return "starting" if meter.rate(now) is None else None


def final_parts(meter: Meter, now: float, unit: str, elapsed: float, completed: bool) -> list[str]:
    """The last line's parts: the totals, the rate of the measured work, and how long."""
    parts = _totals(meter.sample, unit)
    rate = meter.rate(now)
    if rate is not None:
        parts.append(format_rate(rate, unit))
    when = format_duration(elapsed) if elapsed >= 60 else f"{elapsed:.1f} s"
    parts.append(f"done in {when}" if completed else f"stopped after {when}")
    return parts


def _totals(sample: Sample, unit: str) -> list[str]:
    if not sample.position and not sample.count:
        return []  # nothing known yet: "seed: planning"
    parts = [sample.position] if sample.position else []
    return [*parts, f"{sample.count:,} {unit}"]


class Throttle:
    """When a plain line is due: at once, on a phase change, then every ``every_s``."""

    def __init__(self, every_s: float = PLAIN_EVERY_S) -> None:
        self.every_s = every_s
        self._last: float | None = None
        self._phase: str | None = None

    def due(self, now: float, phase: str | None) -> bool:
        if self._last is None or phase != self._phase or now - self._last >= self.every_s:
            self._last, self._phase = now, phase
            return True
        return False

    def wait_s(self, now: float) -> float:
        """Seconds until the next line is due if nothing changes."""
        return 0.0 if self._last is None else max(self._last + self.every_s - now, 0.0)


def terminal_bar(stream: TextIO, data: TextIO | None = None) -> bool:
    """A live bar when ``stream`` is a terminal, unless ``data`` (the command's output) is a
    terminal too: the bar's redraws would erase its lines."""
    if os.environ.get("TERM") == "dumb" or not _isatty(stream):
        return False
    return data is None or not _isatty(data)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


class ProgressDisplay:
    """``start()``, ``update(sample)`` from any thread (before ``start()`` too: the first thing
    shown), ``stop(completed=...)``; or ``with``. Started once; ``stop()`` is safe to call
    again (it prints the final line once).

    ``hold_s``: nothing shows before the work has lasted that long, so a command refused at
    once (a checkpoint from the future, a relay that is not there) is its error line alone;
    work done within the hold shows its final line only."""

    def __init__(
        self,
        task: str,
        unit: str,
        *,
        stream: TextIO | None = None,
        bar: bool | None = None,
        every_s: float = PLAIN_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        hold_s: float = 0.0,
    ) -> None:
        self.task, self.unit, self.clock = task, unit, clock
        self.hold_s = hold_s
        self._hold: threading.Timer | None = None
        self._shown = False
        self.stream = stream if stream is not None else sys.stderr
        self.bar = terminal_bar(self.stream) if bar is None else bar
        self._meter = Meter()
        self._throttle = Throttle(every_s)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._state = "new"
        self._started = 0.0
        self._live: Live | None = None
        self._ticker: threading.Thread | None = None
        self._final_line: str | None = None

    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def finished(self) -> bool:
        return self._state == "stopped"

    def start(self) -> ProgressDisplay:
        if self._state != "new":
            raise RuntimeError(f"progress display {self.task!r} was started already")
        self._state, self._started = "running", self.clock()
        if self.hold_s > 0:
            self._hold = threading.Timer(self.hold_s, self._show)
            self._hold.daemon = True
            self._hold.start()
        else:
            self._show()
        return self

    def show_now(self) -> None:
        """End the hold early: the work is past what could refuse it at once."""
        with self._lock:
            held, self._hold = self._hold, None
        if held is not None:
            held.cancel()
        self._show()

    def _show(self) -> None:
        """Start drawing (at ``start()``, once the hold has passed, or ``show_now()``)."""
        with self._lock:
            if self._state != "running" or self._shown:
                return
            self._shown = True
        if self.bar:
            self._start_bar()
            return
        with self._lock:
            self._line_if_due()  # the first line now: the phase it starts in
        self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._ticker.start()

    def update(self, sample: Sample) -> None:
        with self._lock:
            self._meter.observe(sample, self.clock())
            if self._ticker is not None and self._state == "running":
                self._line_if_due()  # here, so a phase change is a line at once

    def stop(self, *, completed: bool = False) -> None:
        if self._state != "running":
            return
        with self._lock:
            self._state = "stopped"
            held, self._hold = self._hold, None
        self._stopping.set()
        if held is not None:
            held.cancel()
            held.join(timeout=5)  # a display it began to show is finished below
        if not self._shown and not completed:
            return  # stopped within the hold: the error says it all
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        line = self._final(completed)
        if self._live is not None:
            self._stop_bar(line)
        else:
            self._write(f"{self.task}: {', '.join(line)}")

    def __enter__(self) -> ProgressDisplay:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(completed=exc_type is None)

    # -- plain lines --------------------------------------------------------------------------
    def _tick(self) -> None:
        """A line every ``every_s`` though no update comes (a long chunk, a blocked write)."""
        while True:
            with self._lock:
                if self._state != "running":
                    return
                self._line_if_due()
                wait = self._throttle.wait_s(self.clock())
            self._stopping.wait(wait)

    def _line_if_due(self) -> None:
        """Under the lock."""
        now = self.clock()
        if self._throttle.due(now, state(self._meter, now)):
            self._write(f"{self.task}: {', '.join(describe(self._meter, now, self.unit))}")

    def _write(self, line: str) -> None:
        # stderr gone: progress is not worth failing for
        with contextlib.suppress(OSError, ValueError):
            print(line, file=self.stream, flush=True)

    def _final(self, completed: bool) -> list[str]:
        with self._lock:
            now = self.clock()
            return final_parts(self._meter, now, self.unit, now - self._started, completed)

    # -- the bar ------------------------------------------------------------------------------
    def _start_bar(self) -> None:
        # Forced: this display already decided the stream is a terminal (rich alone would
        # also follow FORCE_COLOR and friends). stdout stays as it is: it may carry data.
        console = Console(file=self.stream, force_terminal=True, force_interactive=True)
        self._live = Live(
            console=console,
            refresh_per_second=4,
            redirect_stdout=False,
            get_renderable=self._row,
        )
        self._live.start()
        self._reroute_logs(self.stream, sys.stderr)  # log lines above the bar, not through it

    def _stop_bar(self, line: list[str]) -> None:
        assert self._live is not None
        self._reroute_logs(sys.stderr, self.stream)
        with self._lock:
            self._final_line = ", ".join(line)
        self._live.stop()  # its last refresh draws the final line, which stays

    def _row(self) -> RenderableType:
        with self._lock:
            now = self.clock()
            text = self._final_line or " · ".join(describe(self._meter, now, self.unit))
            fraction = self._meter.fraction()
        return self._grid(fraction, Text(text))

    def _grid(self, fraction: float | None, text: Text) -> Table:
        grid = Table.grid(padding=(0, 1))
        percent = "" if fraction is None else f"{fraction:4.0%}"
        bar = ProgressBar(None if fraction is None else 1.0, fraction or 0.0, width=24)
        grid.add_row(Text(self.task, style="bold"), bar, Text(percent), text)
        return grid

    def _reroute_logs(self, old: TextIO, new: TextIO) -> None:
        """Point the logging handlers that write to ``old`` at ``new`` (rich's proxy for
        stderr while the bar is live, which prints them above it), and back."""
        if old is new:
            return
        handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
        for handler in handlers:
            if handler.stream is old:
                handler.setStream(new)
