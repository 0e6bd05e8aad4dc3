"""The RabbitMQ sink builds each message's properties itself (``message_properties``) instead
of through ``aio_pika.Message``: the frames on the wire must be the same bytes."""

from __future__ import annotations

import aio_pika
from hypothesis import given
from hypothesis import strategies as st
from pamqp.header import ContentHeader

from sluice.sink.amqp import message_properties
from sluice.sink.target import Change

texts = st.text(min_size=1, max_size=20)


@given(
    scn=st.integers(0, 2**63 - 1),
    index=st.integers(0, 2**40),
    source=texts,
    op=st.sampled_from("cudrt"),
    ts_ms=st.integers(0, 4_102_444_800_000),
    version=st.integers(-1, 1000),
    ident=texts,
    body=st.binary(max_size=50),
    content_type=st.sampled_from(["application/json", "avro/binary"]),
)
def test_properties_are_aio_pikas(
    scn: int, index: int, source: str, op: str, ts_ms: int, version: int, ident: str,
    body: bytes, content_type: str,
) -> None:  # fmt: skip
    change = Change(scn, index, source, op, ts_ms, version, None, None, None, None, "r",  # type: ignore[arg-type]
                    ident, body)  # fmt: skip
    theirs = aio_pika.Message(
        change.body, message_id=change.id, delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        headers=dict(change.headers()), content_type=content_type,
        timestamp=change.ts_ms // 1000, app_id="sluice",
    ).properties  # fmt: skip
    ours = message_properties(change, content_type)
    assert ContentHeader(0, len(body), ours).marshal() == (
        ContentHeader(0, len(body), theirs).marshal()
    )
