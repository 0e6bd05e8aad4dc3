"""``sluice.spark.lake_sql`` (pure text): the MERGE statements ``apply_changes`` runs, checked
for the clauses each case needs (the integration tests run them against Delta)."""

from __future__ import annotations

from sluice.spark.lake_sql import MergePlan, quote, scd1_merge, scd2_merge, table_ref


def _plan(truncated: bool = False) -> MergePlan:
    return MergePlan(table_ref("/lake/a`b"), ("id", "na me"), ("id",), truncated)


def test_names_are_quoted_and_paths_are_delta_refs() -> None:
    assert quote("a`b") == "`a``b`"
    assert table_ref("/lake/t") == "delta.`/lake/t`"


def test_scd1_deletes_updates_inserts_and_empties_on_a_truncate() -> None:
    text = scd1_merge(_plan(), "v")
    assert "ON t.`id` <=> s.`id`" in text
    assert "WHEN MATCHED AND s._op = 'd' THEN DELETE" in text
    assert "UPDATE SET t.`id` = s.`id`, t.`na me` = s.`na me`" in text
    assert "WHEN NOT MATCHED AND s._op <> 'd' THEN INSERT (`id`, `na me`)" in text
    assert "NOT MATCHED BY SOURCE" not in text
    assert scd1_merge(_plan(truncated=True), "v").endswith("WHEN NOT MATCHED BY SOURCE THEN DELETE")


def test_scd2_closes_current_versions_and_inserts_new_ones() -> None:
    text = scd2_merge(_plan(), "v", None)
    assert "ON s._closing AND t.`__is_current` AND t.`id` <=> s.`_mk_id`" in text
    assert "t.`__end_scn` = s._end_scn" in text and "t.`__is_current` = false" in text
    assert "WHEN NOT MATCHED AND NOT s._closing THEN INSERT" in text
    assert "s._end_scn IS NULL" in text  # current while nothing ended it
    assert "NOT MATCHED BY SOURCE" not in text
    truncated = scd2_merge(_plan(truncated=True), "v", (42, 1_700_000_000_000_000))
    assert "WHEN NOT MATCHED BY SOURCE AND t.`__is_current` THEN UPDATE SET" in truncated
    assert "t.`__end_scn` = 42" in truncated
    assert "timestamp_micros(1700000000000000)" in truncated
