"""The demo pipeline: a private MariaDB or PostgreSQL, a workload, a relay and consumers,
checked at the end."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from sluice.cli.demo_sources import TABLES, DemoDatabase, demo_database
from sluice.client import AsyncClient, ClientConfig, MemoryCheckpointStore, RetryPolicy
from sluice.core.event import Event
from sluice.errors import SluiceError
from sluice.relay import Relay, RelayConfig
from sluice.testing import ReplicaConsumer


class _LatencyReplica(ReplicaConsumer):
    """A replica that also measures commit-to-consumer latency from ``updated_at``."""

    def __init__(self) -> None:
        super().__init__()
        self.latencies_ms: list[float] = []

    def on_event(self, event: Event) -> None:
        super().on_event(event)
        stamp = (event.after or {}).get("updated_at")
        if stamp and event.source == "shop.product":
            written = dt.datetime.fromisoformat(stamp).replace(tzinfo=dt.UTC)
            self.latencies_ms.append((dt.datetime.now(dt.UTC) - written).total_seconds() * 1000)


class _Workload:
    def __init__(self, db: DemoDatabase, rate: int) -> None:
        self.db = db
        self.conn = db.connect()
        self.rate = rate
        self.rng = random.Random(42)
        self.done = threading.Event()
        self.transactions = 0
        self.next_id = 0

    def run(self, duration: float) -> None:
        cur = self.conn.cursor()
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            started = time.monotonic()
            self.db.transaction(cur, self.next_id, self.rng)
            self.next_id += 1
            self.transactions += 1
            time.sleep(max(0.0, 1 / self.rate - (time.monotonic() - started)))
        self.conn.close()
        self.done.set()


def run(args: argparse.Namespace) -> int:
    base = Path(tempfile.mkdtemp(prefix="sluice-demo-"))
    print(f"sluice demo: working in {base}")
    db = demo_database(args.source, base)
    try:
        db.start()
        db.fill()
        print("tables filled with 60,000 rows before the relay starts")
        return asyncio.run(_pipeline(db, base, args))
    finally:
        db.stop()
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


async def _pipeline(db: DemoDatabase, base: Path, args: argparse.Namespace) -> int:
    config = RelayConfig(
        source=SecretStr(db.url), tables=list(TABLES), data_dir=base / "relay", port=0
    )
    async with Relay(config) as relay:
        url = f"http://127.0.0.1:{relay.port}"
        print(f"relay serving {', '.join(TABLES)} at {url}")
        replica = _LatencyReplica()
        client = AsyncClient(
            ClientConfig(relays=(url,), since_scn=None), replica, MemoryCheckpointStore()
        )
        consumer = asyncio.create_task(client.run())
        job = None if args.no_spark else _start_bootstrap_job(url, base, db.url)
        workload = _Workload(db, args.rate)
        worker = threading.Thread(target=workload.run, args=(args.duration,), daemon=True)
        worker.start()
        await _progress(relay, client, workload)
        target = db.end_scn()  # the workload's last commit ends at or before it
        await _wait(
            lambda: (
                max(relay.stats()["capture"][k] for k in ("last_scn", "source_end_scn")) >= target
            ),
            60,
        )
        await _wait(lambda: client.scn >= relay.buffer.max_scn, 60)
        client.stop()
        await consumer
        replicas: dict[str, ReplicaConsumer] = {"live consumer": replica}
        if job is not None:
            replicas["new consumer from SCN 0 (seeded snapshot + catch-up)"] = await _late_consumer(
                url, job, relay.buffer.max_scn
            )
        return _verify(db, replicas, workload)


def _start_bootstrap_job(
    relay_url: str, base: Path, source_url: str
) -> tuple[Any, threading.Thread]:
    from sluice.bootstrap.job import BootstrapJob, JobConfig  # noqa: PLC0415 - Spark is heavy

    print(
        "starting the Spark bootstrap job beside the relay: change log, snapshots, and a seed "
        "of the existing rows (parallel chunks, no locks) while the workload runs"
    )
    job = BootstrapJob(
        JobConfig(
            relays=(relay_url,),
            sources=TABLES,
            store=str(base / "store"),
            trigger_s=1.0,
            fold_every_s=5.0,
            seed=source_url,
            quiet=True,  # Spark's own output to its log file, not the demo's terminal
        )
    )
    thread = threading.Thread(target=job.run, daemon=True)
    thread.start()
    return job, thread


def _job_reached(job: Any, scn: int) -> bool:
    """Whether the bootstrap job's last micro-batch ended at or after ``scn``."""
    writer = job.log_writer
    return writer is not None and writer.end_scn is not None and writer.end_scn >= scn


async def _late_consumer(
    relay_url: str, running: tuple[Any, threading.Thread], relay_max_scn: int
) -> ReplicaConsumer:
    from sluice.bootstrap.server import BootstrapServer  # noqa: PLC0415

    job, thread = running
    # Stop the job only once its seed is done and its log holds everything the relay has:
    # the snapshot is then complete, whatever the timing of Spark's first micro-batches.
    await _wait(
        lambda: job.error is not None or (job.seeded and _job_reached(job, relay_max_scn)),
        300,
    )
    job.stop()
    await asyncio.to_thread(thread.join, 300)
    if job.error is not None:
        raise SluiceError(f"the bootstrap job failed: {job.error}")
    print(f"bootstrap job stopped: snapshot at SCN {job.store.current_snapshot()}")
    async with BootstrapServer(job.config.store, port=0) as server:
        boot_url = f"http://127.0.0.1:{server.port}"
        late = ReplicaConsumer()
        client = AsyncClient(
            ClientConfig(
                relays=(relay_url,),
                since_scn=0,
                bootstrap=boot_url,
                retry=RetryPolicy(give_up_after_s=60),
            ),
            late,
        )
        await client.run(until_caught_up=True)
        print(
            f"late consumer: read the snapshot from {boot_url}, caught up, back on the relay "
            f"at SCN {client.scn} ({late.events} events)"
        )
    return late


async def _wait(condition: Any, limit_s: float) -> None:
    # Polls because the conditions span threads (capture) and the loop (client).
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


async def _progress(relay: Relay, client: AsyncClient, workload: _Workload) -> None:
    started, last_events, last_time = time.monotonic(), 0, time.monotonic()
    while not workload.done.is_set():
        await asyncio.sleep(1.0)
        now = time.monotonic()
        rate = (client.events - last_events) / (now - last_time)
        last_events, last_time = client.events, now
        stats = relay.stats()
        print(
            f"[{now - started:5.1f}s] txns {workload.transactions:6d}  events {client.events:7d}"
            f" ({rate:7.0f}/s)  relay SCN {stats['max_scn']}  consumer SCN {client.scn}"
            f"  {'caught up' if client.scn >= stats['max_scn'] else 'catching up'}",
            flush=True,
        )


def _verify(db: DemoDatabase, replicas: dict[str, ReplicaConsumer], workload: _Workload) -> int:
    conn = db.connect()
    ok = True
    for name, replica in replicas.items():
        for source in TABLES:
            truth, mine = db.truth(conn, source), replica.snapshot(source)
            if name == "live consumer":
                # It started with the relay: it holds the rows changed since, each as in the
                # source (the rows from before come only through the seed).
                same = all(truth.get(key) == row for key, row in mine.items())
                detail = f"{len(mine)} rows changed since the relay started"
            else:
                same = truth == mine
                detail = f"replica {len(mine)} rows"
            ok &= same
            print(
                f"{name}: {source}: source {len(truth)} rows, {detail}: "
                + ("match" if same else "MISMATCH")
            )
    conn.close()
    live = replicas["live consumer"]
    lat = sorted(live.latencies_ms) if isinstance(live, _LatencyReplica) else []
    if lat:
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print(
            f"commit-to-consumer latency: p50 {statistics.median(lat):.1f} ms, "
            f"p99 {p99:.1f} ms over {len(lat)} events"
        )
    print(f"{workload.transactions} transactions, {live.events} events delivered")
    print("demo OK: every replica equals the source" if ok else "demo FAILED: a replica differs")
    return 0 if ok else 1
