"""The field table of the kinds a cluster file holds, derived from the `kubernetes` client's models
and kept in the user's cache directory, and the unknown fields of an object."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from policyd.backends import kube_fields
from policyd.backends.kube_fields import (
    FieldProblem,
    Table,
    UnknownField,
    derive_table,
    field_problems,
    field_table,
)
from policyd.slips import near_name
from tests.builders import make_node, make_pod


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    field_table.cache_clear()
    yield tmp_path / "policyd"
    field_table.cache_clear()


def test_the_table_holds_every_kind_and_the_fields_of_the_models_they_reach() -> None:
    table = derive_table()
    assert {f"V1{kind}" for kind in kube_fields.KINDS} <= set(table)
    spec = table["V1PodSpec"]
    assert spec["nodeName"] == "str" and spec["tolerations"] == "List[V1Toleration]"
    assert spec["nodeSelector"] == "Dict[str, str]" and "schedulingGates" in spec
    assert set(table["V1Toleration"]) == {"key", "operator", "value", "effect", "tolerationSeconds"}


@pytest.mark.parametrize(
    ("name", "near"),
    [
        ("nodeNme", "nodeName"),  # a letter left out
        ("nodeNmae", "nodeName"),  # two swapped
        ("NodeName", "nodeName"),  # another case
        ("toleration", "tolerations"),  # the singular
        ("tolerationz", "tolerations"),
        ("frobnicate", None),
        ("labels", None),  # a pod's labels written in its spec: a field of another place
    ],
)
def test_a_slip_is_matched_to_the_known_field_of_its_place(name: str, near: str | None) -> None:
    assert near_name(name, derive_table()["V1PodSpec"]) == near


def unknown_fields(obj: dict[str, Any], table: Table | None = None) -> list[FieldProblem]:
    return [p for p in field_problems(obj, table) if isinstance(p, UnknownField)]


def test_unknown_fields_are_found_at_every_depth_in_file_order() -> None:
    pod = make_pod("p", cpu="100m", labels={"anything": "goes"})
    pod["metadata"]["annotatons"] = {}
    pod["spec"]["containers"][0]["resources"]["requests"]["example.com/any"] = "1"  # a map's key
    pod["spec"]["containers"][0]["imag"] = "x"
    pod["spec"]["tolerations"] = [{"key": "a", "operator": "Exists"}, {"Key": "b"}]
    pod["spec"]["extra"] = 1
    assert unknown_fields(pod, derive_table()) == [
        UnknownField(("metadata", "annotatons"), "annotations"),
        UnknownField(("spec", "containers", 0, "imag"), "image"),
        UnknownField(("spec", "tolerations", 1, "Key"), "key"),
        UnknownField(("spec", "extra"), None),
    ]
    assert unknown_fields(make_node("n1"), derive_table()) == []
    assert unknown_fields({"kind": "Deployment", "spec": {"x": 1}}) == []  # not a kind policyd reads


def test_the_table_is_kept_under_the_clients_version_and_read_back(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    derived = field_table()
    kept = list(cache_home.glob("kube-fields-*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == derived
    field_table.cache_clear()

    def no_derivation() -> kube_fields.Table:
        raise AssertionError("derived again although a table is kept")

    monkeypatch.setattr(kube_fields, "derive_table", no_derivation)
    assert field_table() == derived


def test_a_damaged_kept_table_is_derived_again_and_replaced(cache_home: Path) -> None:
    field_table()
    kept = next(cache_home.glob("kube-fields-*.json"))
    kept.write_text('{"V1Pod": {}}')  # half a table
    field_table.cache_clear()
    assert "V1PodSpec" in field_table()
    assert json.loads(kept.read_text()) == field_table()


@pytest.mark.usefixtures("no_cache_directory")
def test_without_a_cache_directory_the_table_is_derived_each_time() -> None:
    field_table.cache_clear()
    try:
        assert field_table()["V1Toleration"]["operator"] == "str"
    finally:
        field_table.cache_clear()


def test_values_of_another_shape_than_their_fields_type_are_found() -> None:
    from policyd.backends.kube_fields import WrongShape

    volume = {
        "kind": "PersistentVolume",
        "metadata": {"name": "v", "labels": {"ssd": True}},  # a label value is a string
        "spec": {
            "capacity": {"storage": 10},  # a quantity may be written as a number
            "claimRef": None,  # null: left out
            "accessModes": "ReadWriteOnce",  # a list
            "nodeAffinity": {"required": [{"key": "a"}]},  # an object
            "mountOptions": ["a", 1.5],
        },
    }
    assert field_problems(volume, derive_table()) == [
        WrongShape(("metadata", "labels", "ssd"), True, "string"),
        WrongShape(("spec", "accessModes"), "ReadWriteOnce", "array"),
        WrongShape(("spec", "nodeAffinity", "required"), [{"key": "a"}], "object"),
    ]
    pod = make_pod("p", cpu="1")
    pod["spec"]["priority"] = 5.0  # an integer to JSON Schema too
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": "80", "hostPort": True}]
    pod["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "labelSelector": "app=web"}]
    assert field_problems(pod, derive_table()) == [
        WrongShape(("spec", "containers", 0, "ports", 0, "containerPort"), "80", "integer"),
        WrongShape(("spec", "containers", 0, "ports", 0, "hostPort"), True, "integer"),
        WrongShape(("spec", "topologySpreadConstraints", 0, "labelSelector"), "app=web", "object"),
    ]
