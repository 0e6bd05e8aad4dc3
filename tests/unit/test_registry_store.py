"""The registry's store: one id per schema whatever its spelling, versions per subject, and a
log that survives restarts and torn writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.errors import ConfigError
from sluice.registry.store import LOG_NAME, RegistryProblem, SchemaStore, parse_version

A = '{"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]}'
A_AGAIN = '{"fields":[{"type":{"type":"int"},"name":"x"}],"name":"A","type":"record"}'
B = '{"type":"record","name":"B","fields":[{"name":"y","type":"string"}]}'


def test_one_id_per_schema_whatever_its_spelling() -> None:
    store = SchemaStore()
    first = store.register("s-value", A)
    assert (first.id, first.version) == (1, 1)
    assert store.register("s-value", A_AGAIN) == first  # no new version
    assert store.register("t-value", A_AGAIN).id == 1  # another subject, the same id
    second = store.register("s-value", B)
    assert (second.id, second.version) == (2, 2)
    assert store.lookup("t-value", A).version == 1
    assert store.version("s-value", None) == second
    assert store.uses(1) == [("s-value", 1), ("t-value", 1)]
    assert store.schema(1) == (
        '{"type":"record","name":"A","fields":[{"name":"x","type":"int"}]}'
    )  # compact, as given


@pytest.mark.parametrize(
    ("text", "said"),
    [("", "Empty schema"), ("{", "Invalid schema"), ('{"type":"recrd"}', "Invalid schema"),
     ('{"type":"record","name":"R"}', "no fields")],
)  # fmt: skip
def test_invalid_schemas_are_42201(text: str, said: str) -> None:
    with pytest.raises(RegistryProblem) as err:
        SchemaStore().register("s", text)
    assert (err.value.status, err.value.code) == (422, 42201) and said in err.value.message


def test_versions_parse_as_confluents() -> None:
    assert parse_version("latest") is None and parse_version("-1") is None
    assert parse_version("3") == 3
    for bad in ("0", "abc", str(2**31)):
        with pytest.raises(RegistryProblem) as err:
            parse_version(bad)
        assert err.value.code == 42202


def test_the_log_survives_a_restart_and_a_torn_write(tmp_path: Path) -> None:
    store = SchemaStore(tmp_path)
    store.register("s-value", A)
    store.register("s-value", B)
    store.set_level("full", "s-value")
    with pytest.raises(ConfigError, match="in use by another registry"):
        SchemaStore(tmp_path)
    store.close()
    with (tmp_path / LOG_NAME).open("a", encoding="utf-8") as log:
        log.write('{"op":"version","subject":"s-value","vers')  # a crash mid-write
    again = SchemaStore(tmp_path)
    assert [v.version for v in again.versions("s-value")] == [1, 2]
    assert again.level("s-value") == "FULL" and again.level() == "BACKWARD"
    assert again.register("u-value", '{"type":"enum","name":"E","symbols":["P"]}').id == 3
    again.close()
    third = SchemaStore(tmp_path)
    assert third.version("u-value", 1).id == 3
    third.close()


def test_deleting_a_subject_takes_confluents_two_steps() -> None:
    store = SchemaStore()
    store.register("s", A)
    with pytest.raises(RegistryProblem) as err:
        store.delete_subject("s", permanent=True)
    assert err.value.code == 40405
    assert store.delete_subject("s") == [1]
    assert store.subjects() == [] and store.subjects(deleted=True) == ["s"]
    assert store.schema(1)  # still readable by id
    assert store.delete_subject("s", permanent=True) == [1]
    with pytest.raises(RegistryProblem) as gone:
        store.schema(1)
    assert gone.value.code == 40403
    with pytest.raises(RegistryProblem) as unknown:
        store.versions("s")
    assert unknown.value.code == 40401
