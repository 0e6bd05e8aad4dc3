"""Values that lie at known places in one buffer of messages, as Arrow arrays: the bulk
paths of log capture (pgoutput runs) and of the query source (MySQL result rows) find where
each column's values are in every message at once with numpy, then read all of them out
with one gather."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

# Where one column's values lie: ``(start, length, valid)``, an entry per message.
Places = tuple[np.ndarray, np.ndarray, np.ndarray]


def gathered(
    buf: np.ndarray, columns: list[Places], types: list[pa.DataType] | None = None
) -> list[pa.Array]:
    """Each column's values as a string array (or of ``types``: string or binary, the
    bytes as they are, not checked for UTF-8), nulls where a value is not valid."""
    rows = len(columns[0][0])
    starts = np.concatenate([start for start, _, _ in columns])
    lengths = np.concatenate([length for _, length, _ in columns])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # each value's bytes: its start, then one further per byte
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    data = pa.py_buffer(buf[index])
    offsets32 = offsets.astype(np.int32)
    out = []
    for k, (_, _, valid) in enumerate(columns):
        nulls = rows - int(np.count_nonzero(valid))
        bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
        # a column's offsets are a slice of the joint ones (Arrow's need not start at 0)
        offsets_k = pa.py_buffer(offsets32[k * rows : (k + 1) * rows + 1])
        kind = pa.string() if types is None else types[k]
        out.append(pa.Array.from_buffers(kind, rows, [bitmap, offsets_k, data], nulls))
    return out
