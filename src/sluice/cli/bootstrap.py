"""``sluice bootstrap run | compact | serve``."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from sluice.cli.common import add_password_file, scn_arg, serve_until_signal
from sluice.cli.progress import ProgressDisplay, Sample
from sluice.core.names import canonical_source
from sluice.errors import ConfigError

if TYPE_CHECKING:
    from sluice.bootstrap.seed.job import SeedProgress


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bootstrap", help="the long-term change log, snapshots, and their server")
    boot = p.add_subparsers(dest="bootstrap_command", required=True)

    run_p = boot.add_parser(
        "run",
        help="stream a relay into the store with Spark, folding snapshots regularly",
        description="A Spark Structured Streaming job: relay -> Parquet change log, plus a "
        "regular fold into one snapshot generation for every source.",
    )
    run_p.add_argument("--relay", action="append", required=True, metavar="URL")
    run_p.add_argument(
        "--source", action="append", dest="sources", required=True, metavar="DB.TABLE"
    )
    run_p.add_argument("--store", required=True, help="a directory or URI (file://, s3a://, ...)")
    run_p.add_argument(
        "--since-scn",
        type=scn_arg,
        help="start the log after this SCN (default: the oldest the relay holds)",
    )
    run_p.add_argument("--master", help=MASTER_HELP.format(default="local[2]"))
    run_p.add_argument("--trigger-seconds", type=float, default=2.0)
    run_p.add_argument("--fold-every", type=float, default=30.0, metavar="SECONDS")
    run_p.add_argument(
        "--max-events-per-trigger",
        type=int,
        default=1_000_000,
        metavar="N",
        help="events per micro-batch (bounds the job's batches and the server's memory)",
    )
    run_p.add_argument(
        "--once", action="store_true", help="read what the relay holds now, fold, and exit"
    )
    run_p.set_defaults(run=_run)

    run_p.add_argument(
        "--seed",
        metavar="URL",
        help="once the stream is in place, seed every source the store has never seeded from "
        "this database (existing rows, then changes: Debezium's snapshot.mode=initial)",
    )
    run_p.add_argument(
        "--chunk-rows", type=int, default=None, metavar="N", help="with --seed: rows per chunk"
    )

    seed = boot.add_parser(
        "seed",
        help="read tables' existing rows into the store (parallel, lock-free, resumable)",
        description="A Spark batch job: each table is cut into primary-key chunks, each read "
        "in its own consistent snapshot and stamped with its SCN; then a snapshot generation "
        "holding every row is published. Runs on a live database, beside the relay and "
        "`bootstrap run`.",
    )
    seed.add_argument(
        "--source",
        required=True,
        metavar="URL",
        help="the database: mysql://USER@HOST:PORT or postgresql://USER@HOST:PORT/DBNAME "
        "(password in the URL, --password-file or SLUICE_SOURCE_PASSWORD)",
    )
    seed.add_argument("--table", action="append", dest="tables", required=True, metavar="DB.TABLE")
    seed.add_argument("--store", required=True, help="the store `bootstrap run` feeds")
    seed.add_argument(
        "--chunk-rows",
        type=int,
        default=None,
        metavar="N",
        help="rows per chunk (one consistent read and one Spark task each; default 250000)",
    )
    seed.add_argument(
        "--parallelism", type=int, metavar="N", help="chunks read at once (default: cores)"
    )
    seed.add_argument("--master", help=MASTER_HELP.format(default="local[N]"))
    seed.add_argument("--where", metavar="SQL", help="seed only the rows matching this condition")
    seed.add_argument(
        "--no-jdbc",
        dest="jdbc",
        action="store_false",
        help="read no chunk through Spark's JDBC source (the fast path), every one through "
        "the ~4x slower row path (when the server refuses Spark's JDBC connections)",
    )
    seed.set_defaults(run=_seed)

    add_password_file(run_p)
    add_password_file(seed)
    compact = boot.add_parser("compact", help="fold the log into a new snapshot now")
    compact.add_argument("--store", required=True)
    compact.add_argument("--master", help=MASTER_HELP.format(default="local[2]"))
    compact.add_argument(
        "--full",
        action="store_true",
        help="fold the whole log instead of the last snapshot + newer changes",
    )
    compact.set_defaults(run=_compact)

    serve = boot.add_parser("serve", help="serve catch-up and snapshots over HTTP")
    serve.add_argument("--store", required=True)
    serve.add_argument("--port", type=int, default=7080)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument(
        "--max-clients",
        type=int,
        default=32,
        help="streams served at once; more get 503 + Retry-After (bounds memory)",
    )
    serve.add_argument("--name", default="bootstrap", help="what its console calls it")
    serve.add_argument(
        "--relay",
        action="append",
        default=[],
        dest="relays",
        metavar="URL",
        help="a relay the store is fed from: its console links to the relay's (repeat)",
    )
    serve.set_defaults(run=_serve)


MASTER_HELP = (
    "Spark master: local[N] (default {default}), spark://HOST:PORT (a standalone cluster), "
    "or sc://HOST:PORT (a Spark Connect server; also SPARK_REMOTE); spark-submit sets it"
)


def _run(args: argparse.Namespace) -> int:
    from sluice.bootstrap.job import BootstrapJob, JobConfig  # noqa: PLC0415 - Spark is heavy
    from sluice.capture.source import check_url  # noqa: PLC0415

    if args.seed:
        check_url(args.seed)
    view = SeedView()
    if args.max_events_per_trigger < 1:
        raise ConfigError(
            f"--max-events-per-trigger must be at least 1, got {args.max_events_per_trigger}"
        )
    job = BootstrapJob(
        JobConfig(
            relays=tuple(args.relay),
            sources=tuple(canonical_source(s) for s in args.sources),
            store=args.store,
            since_scn=args.since_scn,
            master=args.master,
            trigger_s=args.trigger_seconds,
            fold_every_s=args.fold_every,
            once=args.once,
            seed=args.seed,
            seed_chunk_rows=args.chunk_rows,
            max_events_per_trigger=args.max_events_per_trigger,
            quiet=True,
        ),
        seed_progress=view,
    )
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: job.stop())
    try:
        job.run()
    finally:
        view.close()
    print(f"bootstrap store {job.store.uri}: snapshot at SCN {job.store.current_snapshot()}")
    return 0


def _seed(args: argparse.Namespace) -> int:
    from sluice.bootstrap.seed.job import DEFAULT_CHUNK_ROWS, SeedConfig, SeedJob  # noqa: PLC0415
    from sluice.bootstrap.spark_run import run_spark_command  # noqa: PLC0415
    from sluice.capture.source import seed_jars  # noqa: PLC0415

    if args.parallelism is not None and args.parallelism < 1:
        raise ConfigError(f"--parallelism must be at least 1, got {args.parallelism}")
    job = SeedJob(
        SeedConfig(
            args.source,
            tuple(canonical_source(t) for t in args.tables),
            args.store,
            DEFAULT_CHUNK_ROWS if args.chunk_rows is None else args.chunk_rows,
            args.where,
            args.jdbc,
        ),
        progress=(view := SeedView()),
        progress_every_s=1.0,
    )
    master = args.master or (f"local[{args.parallelism}]" if args.parallelism else None)
    try:
        job.prepare()  # bad input fails here, before Spark starts and before anything is written
        report = run_spark_command(
            "the seed failed", master, "sluice-seed", job.run, seed_jars(job.config.source)
        )
    finally:
        job.close()
        view.close()
    total = sum(len(plan.ranges) for plan in job.plans)
    via = f", {report.jdbc_chunks} through Spark's JDBC source" if report.jdbc_chunks else ""
    print(f"read {report.chunks_read} of {total} chunks{via}")
    for seeded in report.seeded:
        print(
            f"seeded {seeded.source}: {seeded.rows} rows in {seeded.chunks} chunks at SCNs "
            f"{seeded.min_scn}..{seeded.max_scn}"
        )
        if seeded.fallback_chunks:
            print(
                f"  {seeded.fallback_chunks} of its chunks went through the slower row path: "
                f"{seeded.fallback}"
            )
    if report.blocked:
        gaps = "; ".join(
            f"{g.source} after SCN {g.after_scn} up to {g.until_scn}" for g in report.blocked
        )
        print(
            f"sluice: no snapshot published: the store's log has a gap ({gaps}); seed "
            f"{' '.join('--table ' + g.source for g in report.blocked)} too",
            file=sys.stderr,
        )
        return 1
    print(
        f"bootstrap store {job.store.uri}: snapshot at SCN {report.snapshot_scn} "
        f"({report.rows} rows seeded in {report.seconds:.1f} s)"
    )
    return 0


class SeedView:
    """A seed's reports on a progress display: one display per seed (``bootstrap run`` seeds
    again after a gap in its log), stopped by "done".

    "planning" is also where the seed checks its input (login, privileges, keys): the display
    is held back until planning has lasted ``HOLD_S`` or has passed, so a seed refused at once
    is its error line alone, as any bad input is."""

    HOLD_S = 1.0

    def __init__(self) -> None:
        self._display: ProgressDisplay | None = None
        self._lock = threading.Lock()

    def __call__(self, progress: SeedProgress) -> None:
        with self._lock:
            display = self._display
            if progress.phase == "done":  # the final line says it
                if display is not None:
                    display.show_now()
                    display.stop(completed=True)
                return
            if display is None or display.finished:
                self._display = ProgressDisplay("seed", "rows", hold_s=self.HOLD_S)
                self._display.update(seed_sample(progress))
                self._display.start()
                return
            display.show_now()  # planning passed: its line first, then this one
            display.update(seed_sample(progress))

    def close(self) -> None:
        """Stop a display left running (a failed or interrupted seed); one stopped within
        its hold stays silent."""
        with self._lock:
            if self._display is not None:
                self._display.stop()


def seed_sample(progress: SeedProgress) -> Sample:
    """Chunks make the bar and the ETA, rows the rate; the phase is shown but "reading"."""
    if not progress.total:
        return Sample(count=progress.rows, phase=progress.phase)
    return Sample(
        progress.chunks,
        progress.total,
        progress.rows,
        f"{progress.chunks}/{progress.total} chunks",
        None if progress.phase == "reading" else progress.phase,
    )


def _compact(args: argparse.Namespace) -> int:
    from sluice.bootstrap.fold import fold  # noqa: PLC0415
    from sluice.bootstrap.spark_run import run_spark_command  # noqa: PLC0415
    from sluice.bootstrap.store import BootstrapStore  # noqa: PLC0415

    store = BootstrapStore(args.store)
    store.meta()
    scn = run_spark_command(
        "the fold failed",
        args.master,
        "sluice-compact",
        lambda spark: fold(spark, store, full=args.full),
    )
    print(f"snapshot at SCN {scn}" if scn is not None else "the log is empty: no snapshot")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from sluice.bootstrap.server import BootstrapServer  # noqa: PLC0415
    from sluice.core.names import check_relay_url  # noqa: PLC0415

    if args.max_clients < 1:
        raise ConfigError(f"--max-clients must be at least 1, got {args.max_clients}")
    if not _wait_for_store(args.store):
        return 0
    for url in args.relays:
        check_relay_url(url)
    server = BootstrapServer(
        args.store, args.host, args.port, args.max_clients, args.name, tuple(args.relays)
    )
    return asyncio.run(
        serve_until_signal(
            server, lambda: f"sluice bootstrap serving on http://{args.host}:{server.port}"
        )
    )


def _wait_for_store(uri: str) -> bool:
    """A store that does not exist yet (``serve`` started beside ``run``) is waited for,
    said once; a directory that is something else is an error. False: stopped by a signal."""
    from sluice.bootstrap.store import MARKER, BootstrapStore  # noqa: PLC0415

    store = BootstrapStore(uri)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    said = False
    while not store.exists(MARKER):
        store.check_empty()
        if not said:
            print(
                f"waiting for the bootstrap store {store.uri} (start `sluice bootstrap run`)",
                file=sys.stderr,
                flush=True,
            )
            said = True
        if stop.wait(1.0):
            return False
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    return True
