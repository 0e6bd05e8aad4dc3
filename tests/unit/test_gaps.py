"""Which sources a log gap blocks from the next snapshot generation (pure logic)."""

from __future__ import annotations

from sluice.bootstrap.fold import blocked_sources
from sluice.bootstrap.seed.records import Seeded
from sluice.bootstrap.store import Gap, StoreMeta, gaps_after

META = StoreMeta(100, ("db.a", "db.b"), added=(("db.b", 400),))
GAP_A = Gap("db.a", 500, 700)
GAP_B = Gap("db.b", 500, 700)


def _seeded(source: str, min_scn: int) -> Seeded:
    return Seeded(source, 1, min_scn, min_scn + 10, 5, 1, 0.0)


def test_a_reader_crosses_a_gap_that_ends_after_where_it_starts() -> None:
    gaps = [GAP_A, GAP_B]
    assert gaps_after(gaps, 499) == gaps
    assert gaps_after(gaps, 650) == gaps  # inside it: what follows is still missing
    assert gaps_after(gaps, 700) == []
    assert gaps_after(gaps, 100, ["db.b"]) == [GAP_B]


def test_no_gap_blocks_nothing() -> None:
    assert blocked_sources(META, 300, {}, []) == {}


def test_a_gap_after_the_previous_generation_blocks_every_source_it_marks() -> None:
    assert blocked_sources(META, 300, {}, [GAP_A, GAP_B]) == {"db.a": GAP_A, "db.b": GAP_B}
    assert blocked_sources(META, 300, {}, [GAP_A]) == {"db.a": GAP_A}


def test_a_gap_before_the_previous_generation_is_folded_past() -> None:
    assert blocked_sources(META, 700, {}, [GAP_A, GAP_B]) == {}


def test_a_seed_read_after_the_gap_unblocks_its_source_only() -> None:
    fresh = {"db.a": _seeded("db.a", 800)}
    assert blocked_sources(META, 300, fresh, [GAP_A, GAP_B]) == {"db.b": GAP_B}


def test_a_seed_read_inside_the_gap_does_not_unblock() -> None:
    fresh = {"db.a": _seeded("db.a", 600)}
    assert blocked_sources(META, 300, fresh, [GAP_A]) == {"db.a": GAP_A}


def test_without_a_generation_each_source_starts_where_its_log_starts() -> None:
    late = Gap("db.b", 200, 300)  # before db.b's log started: not its concern
    assert blocked_sources(META, None, {}, [Gap("db.a", 200, 300), late]) == {
        "db.a": Gap("db.a", 200, 300)
    }


def test_a_gap_marker_names_where_it_starts() -> None:
    assert Gap.from_marker("db.a", 700, '{"gap_after": 500}') == GAP_A
    assert GAP_A.to_json() == [500, 700]
