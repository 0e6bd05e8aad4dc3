"""The private brokers the sinks are tested against: each answers, keeps its data across
kill() + restart(), and stops cleanly (twice, leaving no process behind)."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from pathlib import Path

import aio_pika
import nats
import pytest
import redis
from pamqp.commands import Basic

from sluice.testing.brokers import (
    BrokerNotAvailable,
    PrivateNats,
    PrivateRabbitMQ,
    PrivateRedis,
)

pytestmark = pytest.mark.timeout(180)

_Server = PrivateNats | PrivateRedis | PrivateRabbitMQ


def _name() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def _refuses(port: int, within_s: float = 10.0) -> bool:
    """The port refuses connections (within a few seconds: a killed process's sockets close
    as the kernel reaps it, which a loaded machine does not do at once)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _processes_in(base_dir: Path) -> list[int]:
    """Processes working in ``base_dir`` or with it in their environment (Erlang's helpers)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (
                (entry / "cwd").readlink().is_relative_to(base_dir)
                or str(base_dir).encode() in (entry / "environ").read_bytes()
            ):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or a zombie
            continue
    return found


# NATS JetStream


async def _nats_publish_twice(url: str, stream: str) -> tuple[bool, bool]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        headers = {"Nats-Msg-Id": "m-1"}
        first = await js.publish(f"{stream}.a", b"one", headers=headers)
        second = await js.publish(f"{stream}.a", b"one", headers=headers)
        assert first.seq == second.seq == 1
        return bool(first.duplicate), bool(second.duplicate)
    finally:
        await nc.close()


async def _nats_stream_messages(url: str, stream: str) -> list[bytes]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        return [
            (await js.get_msg(stream, seq)).data or b""
            for seq in range(info.state.first_seq, info.state.last_seq + 1)
        ]
    finally:
        await nc.close()


def test_nats_deduplicates_by_msg_id(nats_server: PrivateNats) -> None:
    stream = _name()
    first, second = asyncio.run(_nats_publish_twice(nats_server.url, stream))
    assert (first, second) == (False, True)
    assert asyncio.run(_nats_stream_messages(nats_server.url, stream)) == [b"one"]


def test_nats_keeps_stream_over_kill_and_restart(nats_server: PrivateNats) -> None:
    stream = _name()
    asyncio.run(_nats_publish_twice(nats_server.url, stream))
    port = nats_server.port
    try:
        nats_server.kill()
        assert _refuses(port)
    finally:
        nats_server.restart()
    assert nats_server.port == port
    assert asyncio.run(_nats_stream_messages(nats_server.url, stream)) == [b"one"]


# Redis Streams


def test_redis_refuses_a_repeated_stream_id(redis_server: PrivateRedis) -> None:
    key = _name()
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.xadd(key, {"k": "v"}, id="5-0") == b"5-0"
        with pytest.raises(redis.ResponseError, match="equal or smaller"):
            client.xadd(key, {"k": "v"}, id="5-0")
        assert client.xlen(key) == 1


def test_redis_keeps_stream_over_kill_and_restart(redis_server: PrivateRedis) -> None:
    key = _name()
    with redis.Redis.from_url(redis_server.url) as client:
        client.xadd(key, {"k": "v"}, id="5-0")
    port = redis_server.port
    try:
        redis_server.kill()
        assert _refuses(port)
    finally:
        redis_server.restart()
    assert redis_server.port == port
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.xrange(key) == [(b"5-0", {b"k": b"v"})]


def test_redis_restarts_after_a_graceful_stop_that_keeps_data(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis").start()
    try:
        with redis.Redis.from_url(server.url) as client:
            client.xadd("s", {"k": "v"}, id="7-0")
        server.stop(keep_data=True)
        server.restart()
        with redis.Redis.from_url(server.url) as client:
            assert client.xrange("s") == [(b"7-0", {b"k": b"v"})]
    finally:
        server.stop()
    assert (tmp_path / "redis").exists()  # a base_dir given by the caller stays


# RabbitMQ


async def _rabbit_publish(url: str, queue_name: str, body: bytes) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue_name, durable=True)
        confirmation = await channel.default_exchange.publish(
            aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=queue_name,
        )
        assert isinstance(confirmation, Basic.Ack)


async def _rabbit_get(url: str, queue_name: str) -> bytes:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, durable=True)
        message = await queue.get(timeout=10)
        await message.ack()
        assert await queue.get(fail=False) is None
        return message.body


def test_rabbitmq_confirms_and_delivers(rabbitmq_server: PrivateRabbitMQ) -> None:
    queue = _name()
    asyncio.run(_rabbit_publish(rabbitmq_server.url, queue, b"hello"))
    assert asyncio.run(_rabbit_get(rabbitmq_server.url, queue)) == b"hello"


def test_rabbitmq_keeps_persistent_message_over_restarts(
    rabbitmq_server: PrivateRabbitMQ,
) -> None:
    queue = _name()
    asyncio.run(_rabbit_publish(rabbitmq_server.url, queue, b"kept"))
    port = rabbitmq_server.port
    # A graceful stop keeps the durable queue and its persistent message (a SIGKILL may lose a
    # queue declared just before it: RabbitMQ syncs its metadata store lazily).
    rabbitmq_server.stop(keep_data=True)
    rabbitmq_server.restart()
    assert f"{queue}\t1" in rabbitmq_server.rabbitmqctl("list_queues", "-q", "name", "messages")
    try:
        rabbitmq_server.kill()
        assert _refuses(port)
        assert not _processes_in(rabbitmq_server.base_dir)
    finally:
        rabbitmq_server.restart()
    assert rabbitmq_server.port == port
    assert f"{queue}\t1" in rabbitmq_server.rabbitmqctl("list_queues", "-q", "name", "messages")
    assert asyncio.run(_rabbit_get(rabbitmq_server.url, queue)) == b"kept"


# Lifecycle


@pytest.mark.parametrize("kind", [PrivateNats, PrivateRedis, PrivateRabbitMQ])
def test_stop_twice_leaves_nothing(kind: type[_Server]) -> None:
    with kind() as server:
        base_dir, port = server.base_dir, server.port
        assert _processes_in(base_dir)
    server.stop()  # the with block stopped it already
    assert not base_dir.exists()
    assert _refuses(port)
    assert not _processes_in(base_dir)
    with pytest.raises(BrokerNotAvailable, match="stopped for good"):
        server.restart()
    assert not base_dir.exists()


def test_missing_binary_names_the_package() -> None:
    class Missing(PrivateRedis):
        binary = "sluice-no-such-server"

    server = Missing()
    with pytest.raises(BrokerNotAvailable, match=r"apt-get install -y redis-server"):
        server.start()
    server.stop()


def test_failed_start_shows_the_log() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = PrivateRedis()
        server.port = taken.getsockname()[1]
        with pytest.raises(BrokerNotAvailable, match=r"(?s)exited with status.*in use"):
            server.start()
    server.stop()
    assert not server.base_dir.exists()
