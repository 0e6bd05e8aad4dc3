"""Which member owns which partition (pure): every member computes the same answer from the
same member list, so no leader is needed."""

from __future__ import annotations

from collections.abc import Sequence


def assign(members: Sequence[str], partitions: int) -> dict[str, tuple[int, ...]]:
    """Partitions dealt round robin over the members in join order (their ZooKeeper sequence
    numbers sort that way): each gets ``partitions // len(members)`` or one more, and a member
    that joins last takes from every other one rather than shifting them all."""
    ordered = sorted(members, key=join_order)
    if not ordered:
        return {}
    owned: dict[str, list[int]] = {m: [] for m in ordered}
    for p in range(partitions):
        owned[ordered[p % len(ordered)]].append(p)
    return {m: tuple(ps) for m, ps in owned.items()}


def join_order(member: str) -> tuple[str, str]:
    # "m-0000000012": the sequence suffix ZooKeeper appended decides; the name breaks ties
    return member.rsplit("-", 1)[-1].rjust(10, "0"), member
