"""The bootstrap log's folders (bootstrap/logparts.py): runs of the writer's batches, named by
the SCN the run starts after, pruned exactly and conservatively whatever the SCNs encode."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.bootstrap import logparts
from sluice.errors import ConfigError


def test_a_folder_is_read_back_from_a_part_files_path() -> None:
    path = "/s/log/source=db.t%3Dx/after_scn=4295285435/part-00012-000-ab.c000.snappy.parquet"
    assert logparts.bucket_of(path) == 4295285435
    assert logparts.bucket_of("/s/log/source=db.t/part-0.parquet") is None
    assert logparts.bucket_of("/s/log/source=after_scn=1/part-0.parquet") is None


def test_a_new_folder_every_so_many_batches_and_when_there_is_none() -> None:
    assert logparts.next_bucket(None, 7, 100, every=10) == 100
    assert logparts.next_bucket(50, 7, 100, every=10) == 50
    assert logparts.next_bucket(50, 10, 100, every=10) == 100


def test_the_first_folder_needed_is_the_highest_not_above_the_bound() -> None:
    assert logparts.first_needed([10, 20, 30], 25) == 20
    assert logparts.first_needed([10, 20, 30], 20) == 20
    assert logparts.first_needed([10, 20, 30], 5) is None
    assert logparts.first_needed([], 5) is None


def test_a_log_in_the_old_layout_is_refused_with_the_fix() -> None:
    logparts.check_layout("/s", ["/s/log/source=a/after_scn=1/part-0.parquet"])
    with pytest.raises(ConfigError, match=r"old layout.*into a new, empty --store"):
        logparts.check_layout("/s", ["/s/log/source=a/log_file=1/part-0.parquet"])


# A writer's life: batches of SCN steps (any size: a binlog offset, a WAL position, microseconds),
# some of them restarts, after which the writer goes on in the newest folder it committed in.
batches = st.lists(
    st.tuples(st.integers(1, 1 << 40), st.booleans(), st.booleans()), min_size=1, max_size=60
)


@settings(max_examples=300, deadline=None)
@given(batches, st.integers(1, 7), st.data())
def test_pruning_never_skips_a_file_with_a_newer_scn(
    steps: list[tuple[int, bool, bool]], every: int, data: st.DataObject
) -> None:
    scn = data.draw(st.integers(0, 1 << 62))
    bucket: int | None = None
    files: list[tuple[int, int]] = []  # (folder, highest SCN) of each committed file
    for number, (step, restart, empty) in enumerate(steps):
        if restart:
            bucket = max((b for b, _ in files), default=None)
        start, scn = scn, scn + step
        bucket = logparts.next_bucket(bucket, number, start, every)
        if not empty:  # a batch without an event of the source writes no file
            files.append((bucket, scn))
    lowest = data.draw(st.integers(0, scn + 1))
    first = logparts.first_needed({b for b, _ in files}, lowest)
    for folder, highest in files:
        if highest > lowest:
            assert first is None or folder >= first
    # a folder every `every` batch numbers at most, however many restarts and SCNs
    assert len({b for b, _ in files}) <= -(-len(steps) // every) + 1
