"""The bootstrap log's rows, fast: windows straight to Arrow columns, no event objects.

What ``bootstrap run`` reads (``includeRaw=true, images=false``): the generic columns with
``before``/``after`` null, the payload kept whole and only the key read from it. Windows are
kept as they come (``arrowrows.HeldWindows``, as the source's other fast rows); ``batch()``
turns them into columns at once (``logcols.Events``).
"""

from __future__ import annotations

import pyarrow as pa

from sluice.spark.arrowrows import HeldWindows
from sluice.spark.logcols import CodecLookup, Events
from sluice.spark.rows import GENERIC_ARROW, RAW_ARROW, GenericRows

_SCHEMA = pa.schema([pa.field(n, t) for n, t in GENERIC_ARROW + RAW_ARROW])


class LogRows(HeldWindows):
    """Accumulates windows as the bootstrap log's columns; ``batch()`` drains them."""

    schema = _SCHEMA

    def __init__(self, op_override: str | None = None) -> None:
        super().__init__()
        self.op_override = op_override

    def _row_path(self) -> GenericRows:
        return GenericRows(include_raw=True, op_override=self.op_override, images=False)

    def _fast(self, events: Events, codec_for: CodecLookup) -> pa.RecordBatch:
        n = len(events)
        scn, ts = self._scn_ts(events)
        arrays = [
            scn,
            events.sources(),
            self._ops(events, self.op_override),
            ts,
            events.keys(codec_for) if n else pa.array([], pa.string()),
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()),
            pa.array(events.version, pa.int32()),
            pa.array(self._seq(events), pa.int32()),
            pa.array(events.key_hash, pa.int64()),
            events.payloads(),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=_SCHEMA)
