"""``ZkCheckpointStore``: a partition's checkpoint in ZooKeeper, every save fenced by the
ownership epoch the partition was taken with."""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import BadVersionError, KazooException, SessionExpiredError

from sluice.core.checkpoint import Checkpoint, decode_checkpoint, encode_checkpoint
from sluice.errors import CoordinatorUnavailable, Fenced


class ZkCheckpointStore:
    """``load``/``save`` as a client's checkpoint store (blocking calls of a few ms; kazoo's
    connection is already up when a partition runs)."""

    def __init__(self, zk: Any, path: str, epoch_path: str, epoch: int, partition: int) -> None:
        self.zk, self.path, self.epoch_path = zk, path, epoch_path
        self.epoch, self.partition = epoch, partition

    def load(self) -> Checkpoint | None:
        try:
            data, _ = self.zk.get(self.path)
        except KazooException as exc:
            raise CoordinatorUnavailable(f"cannot read {self.path}: {exc!r}") from None
        if not data:
            return None
        return decode_checkpoint(data.decode(), where=f"ZooKeeper node {self.path}")

    def save(self, checkpoint: Checkpoint) -> None:
        """Written only while the partition's epoch is still ours (one ZooKeeper
        transaction); ``Fenced`` when another member took the partition."""
        if not self.zk.connected:
            raise CoordinatorUnavailable(f"not connected to ZooKeeper: {self.path} not saved")
        tx = self.zk.transaction()
        tx.check(self.epoch_path, self.epoch)
        tx.set_data(self.path, encode_checkpoint(checkpoint).encode())
        try:
            checked, written = tx.commit()
        except SessionExpiredError:
            raise self._fenced("the member's ZooKeeper session expired") from None
        except KazooException as exc:
            raise CoordinatorUnavailable(f"{self.path} not saved: {exc!r}") from None
        if isinstance(checked, BadVersionError):
            raise self._fenced("another member took it over")
        for result in (checked, written):
            if isinstance(result, Exception):
                raise CoordinatorUnavailable(f"{self.path} not saved: {result!r}")

    def _fenced(self, why: str) -> Fenced:
        return Fenced(
            f"partition {self.partition}'s checkpoint not saved: {why} (epoch {self.epoch} "
            "is not current)",
            partition=self.partition,
        )
