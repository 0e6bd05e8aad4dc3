"""The CLI's progress display: rate and ETA, their wording, when plain lines are due, and the
samples the seed and the tail feed it (``sluice/cli/progress.py``)."""

from __future__ import annotations

import io
import os
import pty
import re
import time

import pytest

from sluice.bootstrap.seed.job import SeedProgress
from sluice.cli.bootstrap import seed_sample
from sluice.cli.progress import (
    Meter,
    ProgressDisplay,
    Sample,
    Throttle,
    describe,
    final_parts,
    format_duration,
    format_rate,
    terminal_bar,
)
from sluice.cli.tail import tail_sample


@pytest.mark.parametrize(
    ("per_s", "text"),
    [
        (250_000.0, "250,000 rows/s"),
        (1234.4, "1,234 rows/s"),
        (12.0, "12 rows/s"),
        (2.5, "2.5 rows/s"),
    ],
)
def test_rates_have_thousands_separators_and_a_decimal_only_below_ten(
    per_s: float, text: str
) -> None:
    assert format_rate(per_s, "rows") == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "0 s"), (5.0, "5 s"), (59.4, "59 s"), (125.0, "2 min 05 s"), (3720.0, "1 h 02 min")],
)
def test_durations_read_as_seconds_minutes_or_hours(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_no_rate_before_the_first_row_so_never_zero_rows_per_second() -> None:
    meter = Meter()
    meter.observe(Sample(0, 24, 0, "0/24 chunks"), now=100.0)
    assert meter.rate(130.0) is None and meter.eta(130.0) is None
    assert describe(meter, 130.0, "rows") == ["0/24 chunks", "0 rows", "starting"]


def test_rate_and_eta_are_measured_from_the_first_sample_without_a_phase() -> None:
    meter = Meter()
    meter.observe(Sample(phase="planning"), now=0.0)
    meter.observe(Sample(4, 24, 400, "4/24 chunks", "starting"), now=50.0)  # 4 resumed
    meter.observe(Sample(4, 24, 400, "4/24 chunks"), now=60.0)  # reading begins
    meter.observe(Sample(12, 24, 1_200_400, "12/24 chunks"), now=64.0)
    assert meter.rate(65.0) == pytest.approx(1_200_000 / 5)  # neither planning nor resumed
    assert meter.eta(65.0) == pytest.approx(12 / (8 / 5))
    assert describe(meter, 65.0, "rows") == [
        "12/24 chunks",
        "1,200,400 rows",
        "240,000 rows/s",
        "ETA 8 s",
    ]


def test_a_phase_after_the_work_shows_instead_of_the_rate_which_then_stays() -> None:
    meter = Meter()
    meter.observe(Sample(0, 2, 0, "0/2 chunks"), now=0.0)
    meter.observe(Sample(2, 2, 1000, "2/2 chunks"), now=10.0)
    meter.observe(Sample(2, 2, 1000, "2/2 chunks", "publishing"), now=10.0)
    assert describe(meter, 40.0, "rows") == ["2/2 chunks", "1,000 rows", "publishing"]
    assert meter.rate(40.0) == pytest.approx(100.0)  # the folding time does not count
    assert final_parts(meter, 40.0, "rows", 42.0, completed=True) == [
        "2/2 chunks",
        "1,000 rows",
        "100 rows/s",
        "done in 42.0 s",
    ]


def test_nothing_known_yet_is_the_phase_alone() -> None:
    meter = Meter()
    meter.observe(Sample(phase="planning"), now=0.0)
    assert describe(meter, 1.0, "rows") == ["planning"]
    assert final_parts(meter, 1.0, "rows", 1.0, completed=False) == ["stopped after 1.0 s"]


def test_no_eta_without_a_total_or_once_the_total_is_reached() -> None:
    meter = Meter()
    meter.observe(Sample(0, None, 0), now=0.0)
    meter.observe(Sample(50, None, 10), now=1.0)
    assert meter.eta(1.0) is None and meter.fraction() is None
    meter.observe(Sample(100, 100, 20), now=2.0)
    assert meter.eta(2.0) is None and meter.fraction() == 1.0


def test_plain_lines_are_due_at_once_on_a_phase_change_and_then_every_interval() -> None:
    throttle = Throttle(every_s=5.0)
    assert throttle.due(0.0, "planning")
    assert not throttle.due(1.0, "planning")
    assert throttle.due(2.0, "starting")  # a new phase: at once
    assert throttle.wait_s(3.0) == pytest.approx(4.0)
    assert not throttle.due(6.9, "starting")
    assert throttle.due(7.0, "starting")
    assert throttle.due(7.5, None)  # the rate replaces "starting"
    assert not throttle.due(12.4, None)
    assert throttle.due(12.5, None)


def test_a_plain_display_prints_lines_without_escapes_and_a_final_line() -> None:
    stream, now = io.StringIO(), [0.0]
    display = ProgressDisplay(
        "seed", "rows", stream=stream, bar=False, every_s=3600, clock=lambda: now[0]
    )
    display.update(Sample(phase="planning"))
    with display:
        assert stream.getvalue() == "seed: planning\n"  # at once
        now[0] = 1.0
        display.update(Sample(0, 4, 0, "0/4 chunks", "starting"))  # a phase change: a line
        assert stream.getvalue().count("\n") == 2
        now[0] = 2.0
        display.update(Sample(0, 4, 0, "0/4 chunks"))  # still "starting": no line
        now[0] = 4.0
        display.update(Sample(4, 4, 4000, "4/4 chunks"))
        assert stream.getvalue().count("\n") == 3
        now[0] = 5.0
    display.stop()  # again: nothing more
    assert stream.getvalue().splitlines() == [
        "seed: planning",
        "seed: 0/4 chunks, 0 rows, starting",
        "seed: 4/4 chunks, 4,000 rows, 2,000 rows/s",  # the first rate: at once
        "seed: 4/4 chunks, 4,000 rows, 1,333 rows/s, done in 5.0 s",  # 4,000 rows in 3 s
    ]


def test_a_display_starts_once() -> None:
    display = ProgressDisplay("seed", "rows", stream=io.StringIO(), bar=False)
    with display, pytest.raises(RuntimeError, match="started already"):
        display.start()


def test_the_bar_is_for_a_terminal_whose_data_output_is_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as terminal, os.fdopen(master, "rb"):
        assert terminal_bar(terminal)
        assert terminal_bar(terminal, data=io.StringIO())
        assert not terminal_bar(terminal, data=terminal)  # redraws would erase its lines
        assert not terminal_bar(io.StringIO())
        monkeypatch.setenv("TERM", "dumb")
        assert not terminal_bar(terminal)


def test_a_seed_shows_chunks_and_its_phases_but_reading() -> None:
    assert seed_sample(SeedProgress("planning")) == Sample(phase="planning")
    assert seed_sample(SeedProgress("reading", 3, 24, 300)) == Sample(3, 24, 300, "3/24 chunks")
    assert seed_sample(SeedProgress("publishing", 24, 24, 2400)).phase == "publishing"


def test_a_tail_counts_scns_past_its_start_up_to_the_relays_max() -> None:
    assert tail_sample(None, None, None, 0) == Sample(phase="connecting")
    assert tail_sample(100, None, 500, 0) == Sample()  # "tail: starting"
    assert tail_sample(100, 300, 500, 7) == Sample(200, 400, 7, "SCN 300/500")
    assert tail_sample(100, 300, None, 7) == Sample(200, None, 7, "SCN 300")
    assert tail_sample(600, 650, 500, 3).total == 0  # already past it: a full bar


def test_a_held_display_stopped_within_its_hold_shows_nothing_or_only_its_final_line() -> None:
    failed, done = io.StringIO(), io.StringIO()
    for stream, completed in ((failed, False), (done, True)):
        display = ProgressDisplay("tail", "events", stream=stream, bar=False, hold_s=60)
        display.update(Sample(phase="connecting"))
        display.start()
        display.update(Sample(5, 5, 50, "SCN 5/5"))
        display.stop(completed=completed)
    assert failed.getvalue() == ""  # the command's error line is all there is
    assert re.fullmatch(r"tail: SCN 5/5, 50 events, .*done in [\d.]+ s\n", done.getvalue())


def test_a_held_display_shows_once_its_hold_has_passed() -> None:
    stream = io.StringIO()
    display = ProgressDisplay("tail", "events", stream=stream, bar=False, hold_s=0.05)
    display.update(Sample(phase="connecting"))
    with display:
        deadline = time.monotonic() + 30
        while "tail: connecting" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stream.getvalue() == "tail: connecting\n"
    assert stream.getvalue().splitlines()[-1].startswith("tail: ")
    assert len(stream.getvalue().splitlines()) == 2
