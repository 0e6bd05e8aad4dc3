"""No datasets here: a fix for pyspark 4.3.0's Spark Connect client, in the process that runs
``spark-pipelines``.

Python data source workers always send (empty) profiler accumulators, which reach the client as
observed metrics named ``__python_accumulator__`` in the run's event stream; the client then
ends the run, after "Run is COMPLETED", with ``[UNKNOWN_RESPONSE] Unknown response: Plan
observed(__python_accumulator__=...)`` and exit status 1 (SPARK-59135). Those messages carry
nothing for a pipeline: they are dropped here. Harmless once pyspark has the fix.
"""

from collections.abc import Iterator
from typing import Any

from pyspark.sql.connect.client.core import PlanObservedMetrics, SparkConnectClient

_ACCUMULATORS = "__python_accumulator__"
_original = SparkConnectClient._execute_and_fetch_as_iterator


def _without_accumulators(self: SparkConnectClient, *args: Any, **kwargs: Any) -> Iterator[Any]:
    for response in _original(self, *args, **kwargs):
        if not (isinstance(response, PlanObservedMetrics) and response.name == _ACCUMULATORS):
            yield response


if not getattr(_original, "sluice_patched", False):  # once, whichever file loads it
    _without_accumulators.sluice_patched = True  # type: ignore[attr-defined]
    SparkConnectClient._execute_and_fetch_as_iterator = _without_accumulators  # type: ignore[method-assign]
