"""What seeding keeps in the store, so a killed seed resumes and the fold knows what is new.

STORE/seeds/SOURCE/gen=G/_plan.json          the key ranges (chunks) of seed generation G
STORE/seeds/SOURCE/gen=G/chunk-NNNNN.parquet  one chunk's rows, in the snapshot's columns
STORE/seeds/SOURCE/gen=G/_done-NNNNN.json     written after its Parquet file: {scn, rows,
                                              finished_at} (older ones: the file's time)
STORE/seeds/SOURCE/gen=G/_run.json           when a resumed seed's run began, with the chunks
                                              and rows done before it (its pace and ETA)
STORE/seeds/SOURCE/SEEDED                     the newest complete generation (min/max SCN...)

Files starting with ``_`` are invisible to Spark's Parquet reader.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow.fs as pafs

from sluice.bootstrap.store import BootstrapStore
from sluice.capture.seeding import KeyRange
from sluice.core.names import folder_name
from sluice.errors import ConfigError


# -- key bounds as JSON (PyMySQL's value types, tagged) ---------------------------------------
def _value_json(value: Any) -> list[Any]:
    if isinstance(value, bool | int):
        return ["int", int(value)]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, bytes):
        return ["bytes", base64.b64encode(value).decode()]
    if isinstance(value, Decimal):
        return ["decimal", str(value)]
    if isinstance(value, dt.datetime):
        return ["datetime", value.isoformat()]
    if isinstance(value, dt.date):
        return ["date", value.isoformat()]
    if isinstance(value, dt.timedelta):
        return ["time", value // dt.timedelta(microseconds=1)]
    raise ConfigError(f"cannot record a key bound of type {type(value).__name__}")


_FROM_JSON: dict[str, Any] = {
    "int": int,
    "str": str,
    "bytes": base64.b64decode,
    "decimal": Decimal,
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": lambda micros: dt.timedelta(microseconds=micros),
}


def _bound_json(bound: tuple[Any, ...] | None) -> list[Any] | None:
    return None if bound is None else [_value_json(v) for v in bound]


def _bound_value(raw: list[Any] | None) -> tuple[Any, ...] | None:
    return None if raw is None else tuple(_FROM_JSON[tag](v) for tag, v in raw)


def range_json(bounds: KeyRange) -> dict[str, Any]:
    return {"lower": _bound_json(bounds.lower), "upper": _bound_json(bounds.upper)}


def range_value(raw: dict[str, Any]) -> KeyRange:
    return KeyRange(_bound_value(raw["lower"]), _bound_value(raw["upper"]))


# -- records -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SeedPlan:
    source: str
    generation: int
    schema_version: int
    chunk_rows: int
    where: str | None
    ranges: tuple[KeyRange, ...]

    def same_request(self, version: int, chunk_rows: int, where: str | None) -> bool:
        return (self.schema_version, self.chunk_rows, self.where) == (version, chunk_rows, where)


@dataclass(frozen=True, slots=True)
class ChunkDone:
    index: int
    scn: int
    rows: int
    finished_at: float = 0.0  # time.time() when its record was written


def seed_pace(
    done: list[ChunkDone], planned: int, started: float, now: float
) -> tuple[float | None, float | None]:
    """``(rows/s, ETA in s)`` of a seed from the chunks this run finished (after ``started``),
    counted from when its first one finished: before that, the time went to the job's start
    (Spark's, several seconds to minutes) and the first chunk's own reading, which would
    make the first ETA many times too long. None until two chunks of this run are done."""
    ran = sorted((d for d in done if d.finished_at >= started), key=lambda d: d.finished_at)
    if len(ran) < 2:
        return None, None
    elapsed = max(now - ran[0].finished_at, 0.001)
    rate = round(sum(d.rows for d in ran[1:]) / elapsed, 1)
    left = planned - len(done)
    return rate, (round(elapsed / (len(ran) - 1) * left, 1) if left > 0 else None)


@dataclass(frozen=True, slots=True)
class Seeded:
    """A complete seed generation: the fold replaces the source's rows with it once."""

    source: str
    generation: int
    min_scn: int
    max_scn: int
    rows: int
    chunks: int
    finished_at: float
    # chunks the fast (JDBC) path should have read but the row path did, and why
    fallback_chunks: int = 0
    fallback: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "min_scn": self.min_scn,
            "max_scn": self.max_scn,
            "rows": self.rows,
            "chunks": self.chunks,
            "finished_at": self.finished_at,
            "fallback_chunks": self.fallback_chunks,
            "fallback": self.fallback,
        }


class SeedRecords:
    """The seed records of one store (pyarrow filesystem, so local paths and URIs alike)."""

    def __init__(self, store: BootstrapStore) -> None:
        self.store = store

    def gen_dir(self, source: str, generation: int) -> tuple[str, ...]:
        return ("seeds", folder_name(source), f"gen={generation}")

    def chunk_file(self, source: str, generation: int, index: int) -> tuple[str, ...]:
        return (*self.gen_dir(source, generation), f"chunk-{index:05d}.parquet")

    def done_file(self, source: str, generation: int, index: int) -> tuple[str, ...]:
        return (*self.gen_dir(source, generation), f"_done-{index:05d}.json")

    def generations(self, source: str) -> list[int]:
        selector = pafs.FileSelector(
            self.store.path("seeds", folder_name(source)), allow_not_found=True
        )
        return sorted(
            int(i.base_name.split("=", 1)[1])
            for i in self.store.fs.get_file_info(selector)
            if i.base_name.startswith("gen=") and i.type == pafs.FileType.Directory
        )

    def plan(self, source: str, generation: int) -> SeedPlan | None:
        parts = (*self.gen_dir(source, generation), "_plan.json")
        if not self.store.exists(*parts):
            return None
        body = self.store.read_json(*parts)
        return SeedPlan(
            source,
            generation,
            int(body["schema_version"]),
            int(body["chunk_rows"]),
            body.get("where"),
            tuple(range_value(r) for r in body["ranges"]),
        )

    def write_plan(self, plan: SeedPlan) -> None:
        body = {
            "schema_version": plan.schema_version,
            "chunk_rows": plan.chunk_rows,
            "where": plan.where,
            "ranges": [range_json(r) for r in plan.ranges],
            "created_at": time.time(),
        }
        self.store.write_json(body, *self.gen_dir(plan.source, plan.generation), "_plan.json")

    def mark_run(self, source: str, generation: int) -> None:
        """A run of a seed generation begins (resuming it): its pace counts from now, over
        the chunks it does, not from the plan's creation over chunks an earlier run did."""
        done = self.done(source, generation)
        body = {
            "started_at": time.time(),
            "chunks_done": len(done),
            "rows_done": sum(d.rows for d in done.values()),
        }
        self.store.write_json(body, *self.gen_dir(source, generation), "_run.json")

    def done(
        self, source: str, generation: int, known: Mapping[int, ChunkDone] | None = None
    ) -> dict[int, ChunkDone]:
        """The chunks done; those in ``known`` (an earlier answer) are not read again."""
        folder = self.store.path(*self.gen_dir(source, generation))
        selector = pafs.FileSelector(folder, allow_not_found=True)
        out: dict[int, ChunkDone] = {}
        for info in self.store.fs.get_file_info(selector):
            name = info.base_name
            if name.startswith("_done-") and name.endswith(".json"):
                index = int(name[6:-5])
                if known is not None and index in known:
                    out[index] = known[index]
                    continue
                body = self.store.read_json(*self.gen_dir(source, generation), name)
                written = info.mtime.timestamp() if info.mtime is not None else 0.0
                finished = float(body.get("finished_at", written))
                out[index] = ChunkDone(index, int(body["scn"]), int(body["rows"]), finished)
        return out

    def seeded(self, source: str) -> Seeded | None:
        if not self.store.exists("seeds", folder_name(source), "SEEDED"):
            return None
        body = self.store.read_json("seeds", folder_name(source), "SEEDED")
        return Seeded(
            source,
            int(body["generation"]),
            int(body["min_scn"]),
            int(body["max_scn"]),
            int(body["rows"]),
            int(body["chunks"]),
            float(body["finished_at"]),
            int(body.get("fallback_chunks") or 0),
            body.get("fallback"),
        )

    def mark_seeded(self, seeded: Seeded) -> None:
        self.store.write_json(seeded.to_json(), "seeds", folder_name(seeded.source), "SEEDED")

    def chunk_paths(self, seeded: Seeded) -> list[str]:
        """Spark paths of a complete generation's chunk files."""
        return [
            self.store.spark_path(*self.chunk_file(seeded.source, seeded.generation, i))
            for i in range(seeded.chunks)
        ]

    def in_progress(
        self, source: str, seen: dict[tuple[str, int], dict[int, ChunkDone]] | None = None
    ) -> dict[str, Any] | None:
        """The newest seed generation when it is not complete yet: chunks planned and done,
        rows so far, and an ETA from its pace (None before the first chunk is done).
        ``seen``: the chunks an earlier call found, kept up to date, so a server asked every
        second reads each chunk's record once."""
        generations = self.generations(source)
        seeded = self.seeded(source)
        if not generations or (seeded is not None and seeded.generation >= generations[-1]):
            return None
        generation = generations[-1]
        key = (source, generation)
        parts = (*self.gen_dir(source, generation), "_plan.json")
        if not self.store.exists(*parts):
            return {"generation": generation, "state": "planning"}
        plan = self.store.read_json(*parts)
        planned = len(plan.get("ranges", []))
        done = self.done(source, generation, None if seen is None else seen.get(key))
        if seen is not None:
            seen[key] = done
        run = self._run(source, generation)
        started = float(run.get("started_at") or plan.get("created_at") or time.time())
        rate, eta = seed_pace(list(done.values()), planned, started, time.time())
        return {
            "generation": generation,
            "state": "seeding",
            "chunks": planned,
            "chunks_done": len(done),
            "rows": sum(d.rows for d in done.values()),
            "rows_per_s": rate,
            "started_at": started,
            "eta_s": eta,
        }

    def _run(self, source: str, generation: int) -> dict[str, Any]:
        parts = (*self.gen_dir(source, generation), "_run.json")
        return self.store.read_json(*parts) if self.store.exists(*parts) else {}

    def all_seeded(self, sources: tuple[str, ...]) -> dict[str, Seeded]:
        out = {}
        for source in sources:
            found = self.seeded(source)
            if found is not None:
                out[source] = found
        return out
