"""``changes``: a streaming table of every relay event, appended once each.

Spark's checkpoint (under the spec's ``storage``) records which SCNs were read, so each run
appends only what the relay got since the last one.
"""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

from sluice.spark import SluiceDataSource

# spark-pipelines puts its session (Spark Connect) in this module before running it
spark: SparkSession = globals()["spark"]

# The format is registered on the pipeline's server session; the flows run there.
spark.dataSource.register(SluiceDataSource)

# includeRaw adds seq (the event's place in its window: the tie-break within one SCN);
# key_hash and payload (the row as Avro) are of no use here and are not kept.
COLUMNS = ["scn", "seq", "source", "op", "ts", "key", "before", "after", "schema_version"]


def _options() -> dict[str, str]:
    relay = spark.conf.get("sluice.relay", None)
    if not relay:
        raise ValueError("set sluice.relay (the relay's URL) in the spec's configuration")
    options = {"relay": relay, "includeRaw": "true"}
    sources = spark.conf.get("sluice.sources", None)
    if sources:
        options["sources"] = sources
    return options


@dp.table(comment="Every change event read from the Sluice relay, once each.")
def changes() -> DataFrame:
    return spark.readStream.format("sluice").options(**_options()).load().select(*COLUMNS)
