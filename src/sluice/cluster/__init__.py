"""Groups of consumers sharing one stream's partitions through ZooKeeper (Aesop's client
cluster): membership, an even assignment, one fenced owner per partition, and checkpoints per
partition kept in ZooKeeper. ``Membership`` runs a member; what it runs per partition is its
caller's (``PartitionWork``): the sink group and the cluster client."""

from sluice.cluster.assign import assign
from sluice.cluster.checkpoints import ZkCheckpointStore
from sluice.cluster.client import AsyncGroupClient, GroupClient
from sluice.cluster.membership import GroupSettings, Membership, PartitionWork
from sluice.cluster.url import CoordinatorUrl, parse_coordinator_url

__all__ = [
    "AsyncGroupClient",
    "CoordinatorUrl",
    "GroupClient",
    "GroupSettings",
    "Membership",
    "PartitionWork",
    "ZkCheckpointStore",
    "assign",
    "parse_coordinator_url",
]
