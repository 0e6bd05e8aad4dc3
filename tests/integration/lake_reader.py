"""Reads Delta tables for ``test_lake.py`` in one Spark session (a JVM start per read would
cost ~15 s each): ``python lake_reader.py SPEC`` with SPEC a JSON list of
``{"label": ..., "table": PATH, "scn": N}`` (or ``"raw": true``); prints
``{label: [row, ...]}`` (rows as Spark's JSON, nulls kept) and
``{label: [[version, scn, app, batch, first_scn], ...]}`` under ``"versions"``."""

from __future__ import annotations

import json
import sys

from sluice.bootstrap.job import spark_session
from sluice.spark.lake import delta_settings, read_as_of, versions


def main() -> None:
    spec = json.loads(sys.argv[1])
    conf = {**delta_settings(), "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.jsonGenerator.ignoreNullFields": "false"}  # fmt: skip
    spark = spark_session("local[2]", "lake-reader", quiet=True, conf=conf)
    out: dict[str, object] = {"versions": {}}
    for item in spec:
        if item.get("raw"):  # every row as stored (SCD2's versions)
            frame = spark.read.format("delta").load(item["table"])
        else:
            frame = read_as_of(spark, item["table"], item["scn"])
        rows = frame.toJSON().collect()
        out[item["label"]] = [json.loads(r) for r in rows]
        out["versions"][item["label"]] = [  # type: ignore[index]
            [v.version, v.scn, v.app, v.batch, v.first_scn]
            for v in versions(spark, item["table"])
        ]
    spark.stop()
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
