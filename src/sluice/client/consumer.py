"""The consumer extension point.

Invariants the client keeps, and a consumer may rely on:
- windows arrive in strictly increasing SCN order; ``on_window_start``, then ``on_event`` for
  each event in log order, then ``on_window_end``;
- a hook that raises fails the whole window: the client calls ``on_rollback(scn)`` (undo or
  forget the window's partial work), waits, and delivers the same window again;
- the checkpoint moves past a window only after ``on_window_end`` returned;
- after a crash, windows after the last checkpoint are delivered again (at-least-once), so
  applying a window must be idempotent (upsert by key, delete by key).
Hooks may be plain functions or coroutines (with ``AsyncClient``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sluice.core.checkpoint import Checkpoint
from sluice.core.event import Event, JsonWindow, Window
from sluice.core.wire import EventSpans
from sluice.errors import SluiceError

if TYPE_CHECKING:
    from sluice.schemas.avro import RowCodec


class ConsumerFailed(SluiceError):
    """The consumer kept failing on one window; its checkpoint is still before that window."""


@runtime_checkable
class Consumer(Protocol):
    def on_window_start(self, scn: int) -> Any: ...
    def on_event(self, event: Event) -> Any: ...
    def on_window_end(self, window: Window) -> Any: ...
    def on_rollback(self, scn: int, error: BaseException) -> Any: ...


@runtime_checkable
class JsonConsumer(Protocol):
    """Takes each window as JSON lines (``Event.to_json_dict()`` as text, one per event).
    The client then decodes Avro straight to text, without building ``Event`` objects: the
    fast path for consumers that write JSON anyway (``sluice tail``). The same invariants
    hold, with ``on_json_window`` as the window's one hook, except that a window bigger than
    ``client.PIECE_BYTES`` (8 MiB) comes in several calls with the same ``scn``, in order, so
    the client never holds it whole: the checkpoint moves after the last; if a call raises,
    ``on_rollback(scn)`` is called and the window is delivered again from its first piece."""

    def on_json_window(self, window: JsonWindow) -> Any: ...
    def on_rollback(self, scn: int, error: BaseException) -> Any: ...


@dataclass(frozen=True, slots=True)
class RecordWindow:
    """A window (or a piece of a big one) as its wire record, undecoded: events
    ``first_seq ..`` of the window; ``last``: its last piece. ``checkpoint`` (on the last
    piece) is where the consumer stands once this window is done, so a consumer that commits
    it together with its own writes (a database replica) gets exactly once. ``codec_for``
    finds every schema version the record uses (the client fetched them)."""

    scn: int
    ts_ms: int
    record: bytes
    codec_for: Callable[[str, int], RowCodec]
    first_seq: int = 0
    last: bool = True
    checkpoint: Checkpoint | None = None
    spans: EventSpans | None = None  # its events' headers, read once (whole windows)


@runtime_checkable
class RecordConsumer(Protocol):
    """Takes window records as they travel (``sluice sink``): decodes what it needs itself.
    The invariants of ``JsonConsumer`` hold (big windows in pieces of ``client.PIECE_BYTES``,
    the same ``scn``, in order; a raise rolls the whole window back and delivers it again
    from its first piece)."""

    def on_record_window(self, window: RecordWindow) -> Any: ...
    def on_rollback(self, scn: int, error: BaseException) -> Any: ...


class BaseConsumer:
    """Override what you need; a consumer raises to fail, it does not return status codes."""

    def on_window_start(self, scn: int) -> Any:
        return None

    def on_event(self, event: Event) -> Any:
        return None

    def on_window_end(self, window: Window) -> Any:
        return None

    def on_rollback(self, scn: int, error: BaseException) -> Any:
        return None
