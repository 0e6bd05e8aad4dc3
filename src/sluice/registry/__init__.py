"""A schema registry Sluice runs (``sluice registry``): the part of Confluent's REST API that
Kafka's Avro serializers and deserializers use, over a store whose ids survive restarts; and
the small client the Kafka sink registers its schemas with (which works against Confluent's
registry too)."""

from sluice.registry.client import RegistryClient
from sluice.registry.server import RegistryServer, registry_app
from sluice.registry.store import Registered, RegistryProblem, SchemaStore

__all__ = [
    "Registered",
    "RegistryClient",
    "RegistryProblem",
    "RegistryServer",
    "SchemaStore",
    "registry_app",
]
