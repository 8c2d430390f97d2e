"""Loading cluster files: kubectl List output, multi-document YAML, JSON; admission defaults; errors."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyd.backends.cluster_file import cluster_objects, load_cluster, load_cluster_text
from policyd.errors import ClusterDataError
from policyd.scheduler.cluster.objects import node_info, pod_info
from tests.builders import make_node, make_pdb, make_pod, make_priority_class

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _objects() -> list[dict[str, Any]]:
    return [
        make_node("n1", zone="a"),
        make_node("n2", zone="b"),
        make_priority_class("high", 1000, preemption_policy="Never"),
        make_pod("web-1", cpu="100m", node_name="n1", labels={"app": "web"}),
        make_pod("web-2", cpu="100m", priority_class="high"),
        make_pdb("web", {"app": "web"}, min_available=1),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}},
    ]


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _check_loaded(c: Any) -> None:
    assert [n["metadata"]["name"] for n in c.nodes] == ["n1", "n2"]
    assert [p["metadata"]["name"] for p in c.pods] == ["web-1", "web-2"]
    assert [p["metadata"]["name"] for p in c.pdbs] == ["web"]
    assert [p["metadata"]["name"] for p in c.priority_classes] == ["high"]
    assert c.pods[1]["spec"]["priority"] == 1000
    assert c.pods[1]["spec"]["preemptionPolicy"] == "Never"


def test_kubectl_list_output(tmp_path: Path) -> None:
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": _objects(), "metadata": {}})
    path = _write(tmp_path, "cluster.yaml", text)
    c = load_cluster(path)
    _check_loaded(c)
    assert c.source == path


def test_multi_document_yaml(tmp_path: Path) -> None:
    text = yaml.safe_dump_all([None, *_objects()])
    _check_loaded(load_cluster(_write(tmp_path, "c.yaml", text)))


def test_json_list_and_api_lists_without_item_kinds(tmp_path: Path) -> None:
    _check_loaded(load_cluster(_write(tmp_path, "c.json", json.dumps(_objects(), indent=1))))
    objs = _objects()
    nodes = [{k: v for k, v in o.items() if k != "kind"} for o in objs[:2]]
    doc = {"kind": "List", "items": [{"kind": "NodeList", "items": nodes}, *objs[2:]]}
    _check_loaded(load_cluster(_write(tmp_path, "d.json", json.dumps(doc))))


def test_in_memory_objects_and_views() -> None:
    c = cluster_objects(_objects())
    _check_loaded(c)
    assert pod_info(c.pods[1]).priority == 1000
    assert node_info(c.nodes[0]).name == "n1"


def test_unquoted_yaml_timestamps_stay_strings() -> None:
    c = load_cluster_text(
        "kind: Pod\nmetadata:\n  name: p\n  creationTimestamp: 2024-01-01T00:00:00Z\n"
        "spec:\n  containers: [{name: c}]\n"
    )
    assert c.pods[0]["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"


def test_namespace_defaults_for_pods_and_pdbs() -> None:
    c = load_cluster_text(
        "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n"
        "---\nkind: PodDisruptionBudget\nmetadata: {name: b}\n"
    )
    assert c.pods[0]["metadata"]["namespace"] == "default"
    assert c.pdbs[0]["metadata"]["namespace"] == "default"


def test_priority_admission() -> None:
    objs = [
        make_priority_class("normal", 100, global_default=True),
        make_priority_class("low", -5),
        make_pod("defaulted"),
        make_pod("named", priority_class="low"),
        make_pod("explicit", priority_class="low", priority=7),
        make_pod("system", priority_class="system-node-critical"),
    ]
    pods = {p["metadata"]["name"]: p["spec"] for p in cluster_objects(objs).pods}
    assert pods["defaulted"]["priority"] == 100 and pods["defaulted"]["priorityClassName"] == "normal"
    assert pods["named"]["priority"] == -5 and pods["named"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert pods["explicit"]["priority"] == 7
    assert pods["system"]["priority"] == 2000001000
    assert cluster_objects([make_pod("p")]).pods[0]["spec"]["priority"] == 0


def test_priority_admission_errors() -> None:
    with pytest.raises(ClusterDataError, match="no PriorityClass named 'gold'"):
        cluster_objects([make_pod("p", priority_class="gold")])
    with pytest.raises(ClusterDataError, match="both globalDefault"):
        cluster_objects(
            [
                make_priority_class("a", 1, global_default=True),
                make_priority_class("b", 2, global_default=True),
            ]
        )
    bad = make_priority_class("a", 1)
    bad["value"] = "high"
    with pytest.raises(
        ClusterDataError, match='priorityclass a: value: Invalid value: "high": must be of type integer'
    ):
        cluster_objects([bad])


def test_other_kinds_are_ignored_with_a_log_note(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="policyd.backends.cluster_file"):
        c = cluster_objects(_objects())
    assert len(c.pods) == 2
    assert [w["metadata"]["name"] for w in c.workloads] == ["web"]  # Services select pods: kept
    assert "kind=ConfigMap count=1" in caplog.text


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("kind: Pod\nmetadata: {name: p\n", r"c\.yaml:3:1: invalid YAML"),
        ('{"kind": "Pod",\n "metadata": }', r"c\.yaml:2:14: invalid JSON"),
        # every later walk recurses per level; past the decoder's own recursion, it raised RecursionError
        (
            '{"kind": "Node", "metadata": {"x": ' + "[" * 70 + "]" * 70 + "}}",
            r"c\.yaml: invalid JSON: nested more than 64",
        ),
        (
            '{"kind": "Node", "metadata": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}",
            r"c\.yaml: invalid JSON: nested too deeply",
        ),
        (
            "kind: Node\nmetadata: {x: " + "[" * 70 + "]" * 70 + "}\n",
            r"c\.yaml:2:77: invalid YAML: nested more than 64",
        ),
        (
            "kind: List\nitems:\n- kind: Pod\n  metadata: {name: a}\n- kind: Pod\n  metadata: {}\n",
            r"c\.yaml:5: Pod without metadata\.name",
        ),
        ("kind: Pod\nmetadata: {name: a}\n---\nmetadata: {name: b}\n", r"c\.yaml:4: object without kind"),
        ("- 1\n", r"c\.yaml.*expected a Kubernetes object, got int"),
        (
            "kind: Pod\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: a, namespace: default}\n",
            r"c\.yaml:4: duplicate Pod default/a \(first at .*c\.yaml:1\)",
        ),
        # a slip in a kind policyd reads would drop the object without a word
        (
            "kind: Pod\nmetadata: {name: a}\n---\nkind: Nod\nmetadata: {name: n}\n",
            r"c\.yaml:4: unknown kind 'Nod' \(did you mean 'Node'\?\)",
        ),
        ("kind: Pods\nmetadata: {name: a}\n", r"c\.yaml:1: unknown kind 'Pods' \(did you mean 'Pod'\?\)"),
        ("kind: node\nmetadata: {name: a}\n", r"unknown kind 'node' \(did you mean 'Node'\?\)"),
        ("kind: PersitentVolume\nmetadata: {name: a}\n", r"did you mean 'PersistentVolume'\?"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path: Path, text: str, pattern: str) -> None:
    with pytest.raises(ClusterDataError, match=pattern):
        load_cluster(_write(tmp_path, "c.yaml", text))


UNKNOWN_FIELDS = """\
kind: List
items:
- kind: Node
  metadata: {name: n1}
  status:
    allocatable: {cpu: "4", memory: 8Gi, pods: "110"}
- kind: Pod
  metadata:
    name: p
    labels: {app: web}
  spec:
    containers: [{name: c, image: x}]
    tolerations:
    - key: a
      operatr: Exists
    nodeSelectr:
      zone: a
"""


def test_a_misspelt_field_is_an_error_at_its_key_naming_the_field_it_is_a_slip_of(tmp_path: Path) -> None:
    with pytest.raises(ClusterDataError) as caught:
        load_cluster(_write(tmp_path, "c.yaml", UNKNOWN_FIELDS))
    lines = str(caught.value).splitlines()
    assert lines == [
        f'{tmp_path}/c.yaml:15:7: pod default/p: spec.tolerations[0].operatr: unknown field "operatr"'
        ' (did you mean "operator"?)',
        f'{tmp_path}/c.yaml:16:5: pod default/p: spec.nodeSelectr: unknown field "nodeSelectr"'
        ' (did you mean "nodeSelector"?)',
    ]


def test_a_misspelt_field_of_json_or_in_memory_objects_names_the_object() -> None:
    pod = make_pod("p", cpu="100m")
    pod["spec"]["priorty"] = 5
    with pytest.raises(ClusterDataError, match=r'objs \[0\]: pod default/p: spec\.priorty: .*"priority"'):
        cluster_objects([pod], "objs")
    with pytest.raises(ClusterDataError, match=r"^j\.json: pod default/p: spec\.priorty: unknown field"):
        load_cluster_text(json.dumps(pod), "j.json")


def test_an_unknown_field_that_is_no_slip_is_logged_once_per_kind_and_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pods = [make_pod(f"p{i}", cpu="100m") for i in range(3)]
    for pod in pods:
        pod["spec"]["containers"][0]["frobnicate"] = True  # a newer API's field, say
    with caplog.at_level(logging.WARNING, logger="policyd.backends.cluster_file"):
        loaded = cluster_objects([make_node("n1"), *pods], "objs")
    assert len(loaded.pods) == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "cluster file: unknown field ignored file=objs kind=Pod field=spec.containers[*].frobnicate"
        " objects=3 first=objs [1]"
    ]


def test_a_file_of_known_fields_loads_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="policyd.backends.cluster_file"):
        cluster_objects(_objects(), "objs")
        load_cluster(str(EXAMPLES / "cluster.yaml"))
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_value_of_another_shape_than_its_field_is_an_error_at_its_key(tmp_path: Path) -> None:
    """Kinds the cluster schema does not describe (volumes, claims, Services) are held to the
    client's types: a list where an object goes would have reached the code that reads it."""
    text = (
        "kind: PersistentVolume\nmetadata: {name: v}\nspec: []\n---\n"
        "kind: Service\nmetadata: {name: s}\nspec:\n  selector: [app]\n"
    )
    with pytest.raises(ClusterDataError) as caught:
        load_cluster(_write(tmp_path, "c.yaml", text))
    assert str(caught.value).splitlines() == [
        f"{tmp_path}/c.yaml:3:1: persistentvolume v: spec: Invalid value: []: must be of type object",
        f'{tmp_path}/c.yaml:8:3: service default/s: spec.selector: Invalid value: ["app"]: must be of type'
        " object",
    ]


def test_a_shape_the_schema_reports_is_reported_once() -> None:
    pod = make_pod("p", cpu="100m")
    pod["spec"]["containers"] = "c"
    with pytest.raises(ClusterDataError) as caught:
        cluster_objects([pod], "objs")
    assert [line.split(": ", 2)[2] for line in str(caught.value).splitlines()] == [
        'spec.containers: Invalid value: "c": must be of type array'
    ]


def test_kinds_policyd_does_not_read_are_not_taken_for_slips() -> None:
    from policyd.backends.cluster_file import near_kind

    others = ["APIService", "Deployment", "DaemonSet", "Job", "Role", "Lease", "Event", "PodTemplate"]
    assert [near_kind(k) for k in others] == [None] * len(others)
    assert near_kind("StorageClasses") == "StorageClass" and near_kind("Servic") == "Service"


def test_missing_file_is_a_cluster_data_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterDataError, match="cannot read cluster file"):
        load_cluster(str(tmp_path / "nope.yaml"))


def test_shipped_example_cluster_loads_into_views() -> None:
    c = load_cluster(str(EXAMPLES / "cluster.yaml"))
    nodes = [node_info(n) for n in c.nodes]
    pods = [pod_info(p) for p in c.pods]
    assert len(nodes) >= 5 and len(pods) >= 15 and c.pdbs and c.priority_classes
    zones = {n.labels.get("topology.kubernetes.io/zone") for n in nodes}
    assert len(zones - {None}) >= 2
    assert any(n.unschedulable for n in nodes) and any(n.taints for n in nodes)
    pending = [p for p in pods if not p.node_name]
    assert len(pending) >= 12
    assert all(p.scheduler_name == "default-scheduler" for p in pending)
    assert all(p.raw["spec"].get("schedulerName") is None for p in pending)
    by_name = {n.name: n for n in nodes}
    for p in pods:
        if p.node_name:
            by_name[p.node_name].add_pod(p)
    for n in nodes:  # the running pods fit where they run
        assert all(v >= 0 for v in n.cel["free"].values()), n.name


def test_storage_kinds_with_api_defaults() -> None:
    """PVs, PVCs, StorageClasses, CSINodes and CSIDrivers are read, defaulted as the API server and
    the PV controller would leave them."""
    loaded = cluster_objects(
        [
            {"kind": "StorageClass", "metadata": {"name": "sc"}, "provisioner": "x"},
            {"kind": "PersistentVolume", "metadata": {"name": "free"}, "spec": {}},
            {"kind": "PersistentVolume", "metadata": {"name": "taken"}, "spec": {"claimRef": {"name": "c"}}},
            {"kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "spec": {}},
            {"kind": "CSINode", "metadata": {"name": "n1"}, "spec": {"drivers": []}},
            {"kind": "CSIDriver", "metadata": {"name": "csi.example.com"}, "spec": {}},
        ]
    )
    assert loaded.storage_classes[0]["volumeBindingMode"] == "Immediate"
    assert [pv["status"]["phase"] for pv in loaded.persistent_volumes] == ["Available", "Bound"]
    assert loaded.persistent_volume_claims[0]["metadata"]["namespace"] == "default"
    assert [o["kind"] for o in loaded.storage()] == [
        "StorageClass",
        "CSIDriver",
        "CSINode",
        "PersistentVolume",
        "PersistentVolume",
        "PersistentVolumeClaim",
    ]
