"""Reading SCN ranges and snapshots for Spark: relays first, the bootstrap server as fallback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from sluice.blocking_http import frames, frames_in_pieces, get_json
from sluice.core.names import schemas_path
from sluice.core.pieces import Piece
from sluice.core.wire import Heartbeat, decode_events, read_window_header
from sluice.errors import BootstrapRequired, ConfigError, RelayUnavailable, SchemaError
from sluice.schemas import RowCodec, SchemaRegistry, TableSchema
from sluice.schemas.debezium import check_connector
from sluice.spark.options import SourceOptions

_registries: dict[tuple[str, ...], SchemaRegistry] = {}  # per worker process
# A window bigger than this reaches the rows in pieces (a huge transaction is never whole in
# a reader's memory; its micro-batch's Arrow batches stay the usual size).
PIECE_BYTES = 4 << 20


def _events(record: bytes) -> int:
    return read_window_header(record).n_events


class Fetcher:
    """Stateless apart from a per-process schema cache, so it pickles to workers cheaply."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    # -- servers -----------------------------------------------------------------------------
    def _relay_call(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        errors = []
        for url in self.options.relays:
            try:
                return get_json(url, path, params)
            except RelayUnavailable as exc:
                errors.append(str(exc))
        raise RelayUnavailable("no relay answered: " + "; ".join(errors))

    def relay_stats(self) -> dict[str, Any]:
        return self._relay_call("/stats")

    def bootstrap_stats(self) -> dict[str, Any]:
        return get_json(self._bootstrap(), "/stats")

    def _bootstrap(self) -> str:
        if self.options.bootstrap is None:
            raise BootstrapRequired(
                "the relay no longer holds the requested SCN; set option bootstrap to a "
                "bootstrap server URL, or start later (startingScn=earliest)"
            )
        return self.options.bootstrap

    def source_info(self) -> dict[str, Any]:
        """How event formats name the relay's database (Debezium's source block)."""
        return dict(self._relay_call("/sources").get("source") or {})

    def check_debezium(self) -> None:
        """Refuse format=debezium for a source without Debezium conventions, at once."""
        check_connector(self.source_info())

    def relay_sources(self) -> list[str]:
        return sorted(s["source"] for s in self._relay_call("/sources")["sources"])

    def check_sources(self) -> None:
        known = set(self.relay_sources())
        unknown = [s for s in self.options.sources if s not in known]
        if unknown:
            raise SchemaError(
                f"unknown source {unknown[0]!r}; the relay captures: " + ", ".join(sorted(known))
            )

    def source_holds(self, since_scn: int) -> bool:
        """Whether a relay can still read the windows after ``since_scn`` again from its
        source's binlog (a cold read starts); False when the source purged those binlogs."""
        params = {"since_scn": str(since_scn), "timeout_ms": "0", "max_bytes": "1", "cold": "true"}
        if self.options.sources:
            params["sources"] = ",".join(self.options.sources)
        try:
            for _frame in self._relay_frames(params):
                break  # the relay accepted the range: the binlog is there
        except BootstrapRequired:
            return False
        return True

    def _relay_frames(self, params: dict[str, str]) -> Iterator[bytes | Heartbeat]:
        errors = []
        for url in self.options.relays:
            try:
                yield from frames(url, "/stream", params)
                return
            except RelayUnavailable as exc:
                errors.append(str(exc))
        raise RelayUnavailable("no relay answered: " + "; ".join(errors))

    def offset_after(self, since_scn: int, max_events: int) -> dict[str, Any]:
        params = {"since_scn": str(since_scn), "max_events": str(max_events)}
        if self.options.sources:
            params["sources"] = ",".join(self.options.sources)
        try:
            return self._relay_call("/offsets", params)
        except BootstrapRequired:
            return get_json(self._bootstrap(), "/offsets", params)

    def scn_cuts(self, start: int, end: int, parts: int) -> list[int] | None:
        """SCNs cutting the windows of ``(start, end]`` into ``parts`` runs of about equal
        events (whole windows), from a relay's buffer; None when no relay holds the range
        (older than its buffer: the caller splits by key instead)."""
        sources = {"sources": ",".join(self.options.sources)} if self.options.sources else {}

        def after(since: int, events: int | None) -> dict[str, Any]:
            limit = {"max_events": str(events)} if events else {}
            return self._relay_call("/offsets", {"since_scn": str(since), **sources, **limit})

        cuts: list[int] = []
        try:
            # A capped micro-batch is what /offsets found for the cap: count no further than
            # it (a job far behind would otherwise have the relay count its whole buffer).
            total = int(after(start, self.options.max_events)["events"])
            since = start
            for _ in range(parts - 1):
                scn = min(int(after(since, max(-(-total // parts), 1))["scn"]), end)
                if scn <= since or scn >= end:
                    break
                cuts.append(scn)
                since = scn
        except (BootstrapRequired, RelayUnavailable):
            return None
        return cuts

    # -- schemas -----------------------------------------------------------------------------
    def schema(self, source: str) -> TableSchema:
        versions = self._relay_call(schemas_path(source))["versions"]
        if not versions:
            raise SchemaError(f"no schema yet for {source}: no row of it was captured")
        return TableSchema.from_avro(versions[-1])

    def codec(self, source: str, version: int) -> RowCodec:
        registry = _registries.setdefault(self.options.relays, SchemaRegistry())
        try:
            return registry.codec(source, version)
        except SchemaError:
            bases = [
                *self.options.relays,
                *([self.options.bootstrap] if self.options.bootstrap else []),
            ]
            for base in bases:
                try:
                    for schema in get_json(base, schemas_path(source))["versions"]:
                        registry.add(TableSchema.from_avro(schema))
                    return registry.codec(source, version)
                except (RelayUnavailable, SchemaError):
                    continue
            raise

    # -- data --------------------------------------------------------------------------------
    def _params(self, since: int, index: int, count: int) -> dict[str, str]:
        params = {"since_scn": str(since), "timeout_ms": "0", "max_bytes": str(8 << 20)}
        if self.options.sources:
            params["sources"] = ",".join(self.options.sources)
        if count > 1:
            params["partition"] = f"{index}/{count}"
        if self.options.cold_read:
            params["cold"] = "true"
        return params

    def windows(self, start: int, end: int, index: int, count: int) -> Iterator[bytes | Piece]:
        """Windows with ``start < scn <= end`` in key partition ``index/count``; a window
        bigger than ``PIECE_BYTES`` in ``Piece``s, so no reader holds it whole."""
        scn, idle = start, 0
        given = (0, 0)  # pieces of an unfinished window given: (its SCN, events)
        while scn < end:
            progressed = False
            for frame in self._stream(scn, index, count):
                if isinstance(frame, Piece):
                    frame_scn = read_window_header(frame.record).scn
                    if frame_scn > end:
                        return
                    # Read again after a failover: its pieces are cut alike; skip the given.
                    already = given[1] if given[0] == frame_scn else 0
                    if frame_scn > scn and frame.first_seq >= already:
                        yield frame
                        given = (frame_scn, frame.first_seq + _events(frame.record))
                    if not frame.last:
                        continue
                else:
                    frame_scn = (
                        frame.scn if isinstance(frame, Heartbeat) else read_window_header(frame).scn
                    )
                    if frame_scn > end:
                        return
                    # A relay that failed mid-stream is followed by the next one from
                    # ``since`` again: windows already given are skipped, never given twice.
                    if not isinstance(frame, Heartbeat) and frame_scn > scn:
                        yield frame
                if frame_scn > scn:
                    scn, progressed = frame_scn, True
                if scn >= end:
                    return
            idle = 0 if progressed else idle + 1
            if idle > 600:
                raise RelayUnavailable(f"no relay reached SCN {end} (stuck at {scn})")
            if not progressed:
                time.sleep(0.1)

    def _stream(self, since: int, index: int, count: int) -> Iterator[bytes | Heartbeat | Piece]:
        params = self._params(since, index, count)
        errors = []
        for url in self.options.relays:
            try:
                yield from frames_in_pieces(url, "/stream", params, PIECE_BYTES)
                return
            except BootstrapRequired:
                break
            except RelayUnavailable as exc:
                errors.append(str(exc))
        else:
            raise RelayUnavailable("no relay answered: " + "; ".join(errors))
        yield from frames_in_pieces(self._bootstrap(), "/stream", params, PIECE_BYTES)

    def snapshot_windows(self, index: int, count: int) -> Iterator[bytes]:
        """Every row of the bootstrap snapshot (key partition ``index/count``), resumable."""
        after: str | None = None
        while True:
            params = self._params(0, index, count)
            del params["since_scn"], params["timeout_ms"]
            if after is not None:
                params["after"] = after
            done = False
            for frame in frames(self._bootstrap(), "/snapshot", params):
                if isinstance(frame, Heartbeat):
                    done = True
                    break
                yield frame
                after = _last_cursor(frame)
            if done:
                return
            if after is None:
                raise ConfigError("the bootstrap server sent an empty, unfinished snapshot")


def _last_cursor(window: bytes) -> str:
    """Snapshot windows hold rows of one source; ``prev_scn`` carries the last row's number."""
    return f"{decode_events(window)[0].source}:{read_window_header(window).prev_scn}"
