"""Running a Spark batch command from the CLI: one session, failures as one sentence, and
SIGINT/SIGTERM as a clean stop (no Java or Py4J traceback)."""

from __future__ import annotations

import logging
import signal
import threading
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from pyspark.errors import PySparkException

from sluice.bootstrap.job import cancel_jobs, spark_failure, spark_session
from sluice.errors import Interrupted, SluiceError

log = logging.getLogger(__name__)
T = TypeVar("T")


def run_spark_command(
    what: str,
    master: str | None,
    app: str,
    body: Callable[[Any], T],
    jars: tuple[str, ...] = (),
    conf: dict[str, str] | None = None,
    graceful: Callable[[], None] | None = None,
) -> T:
    """``body(spark)`` in a quiet session (with ``jars``); a Spark failure (the JVM not
    starting included) is one sentence, a signal cancels the running jobs and is reported as
    ``Interrupted`` (or, with ``graceful``, calls it: the body then ends by itself)."""
    stopping = threading.Event()
    spark: Any = None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if graceful is not None:  # the body ends by itself (a JVM killed too: Interrupted)
            stopping.set()
            graceful()
            return
        if not stopping.is_set():
            stopping.set()
            if spark is not None:
                # From another thread: this one is inside a Py4J call (its connection is busy).
                # The blocked Spark call then returns with an error, reported as Interrupted.
                threading.Thread(target=_cancel_quietly, args=(spark,), daemon=True).start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        spark = spark_session(master, app, quiet=True, jars=jars, conf=conf)
        return body(spark)
    except Exception as exc:
        if stopping.is_set():
            raise Interrupted(
                f"{app.removeprefix('sluice-')} stopped by a signal; what it finished is kept: "
                "run it again to resume"
            ) from None
        if isinstance(exc, SluiceError):
            raise
        if isinstance(exc, PySparkException) or type(exc).__module__.startswith("py4j"):
            raise spark_failure(what, exc) from None
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if spark is not None:
            stop_session(spark, stopping=stopping.is_set())


def stop_session(spark: Any, *, stopping: bool) -> None:
    """``spark.stop()``. When a signal stops the command, Spark's JVM may be gone already:
    SIGTERM to the whole process group (systemd's stop) reaches it too. There is nothing left
    to stop then, and Py4J's failure to reach it is not the user's news."""
    if not stopping:
        spark.stop()
        return
    try:
        with warnings.catch_warnings():  # pyspark warns it could not stop a JVM that is gone
            warnings.simplefilter("ignore")
            spark.stop()
    except Exception as exc:
        log.debug("Spark's session could not be stopped (its JVM stopped first): %s", exc)


def _cancel_quietly(spark: Any) -> None:
    """Cancel the running jobs; when the JVM got the signal too (SIGTERM to the process
    group), it is gone and there is nothing to cancel: a DEBUG line, not a thread's
    traceback on stderr."""
    try:
        cancel_jobs(spark)
    except Exception as exc:  # Py4J's errors: the gateway closed under us
        log.debug("cancelling Spark's jobs: %r (the JVM stopped too)", exc)
