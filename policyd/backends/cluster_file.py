"""Load cluster objects from a file: `kubectl get nodes,pods,pdb,priorityclasses,services,replicasets,
statefulsets,replicationcontrollers -A -o yaml` output,
a `kind: List` (or `PodList`, `NodeList`, ... as the API returns), multi-document YAML, or JSON.

Objects stay raw API dicts (PodInfo/NodeInfo are built by the cache); the loader only applies what the API server
would have done on admission: the default namespace, and the Priority admission plugin (spec.priority
and spec.preemptionPolicy from the pod's PriorityClass, or the globalDefault class).
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from policyd.backends import kube_fields, validation
from policyd.errors import ClusterDataError
from policyd.slips import did_you_mean, near_name
from policyd.yaml_loading import MAX_NESTING, FastSafeLoader, json_loads, nested_deeper

__all__ = ["ClusterObjects", "cluster_objects", "load_cluster", "load_cluster_text"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# Built-in classes that exist in every cluster (kube-apiserver creates them).
SYSTEM_PRIORITY_CLASSES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}

_KINDS = {
    "Namespace": "namespaces",  # kept for a namespace selector's labels
    "Node": "nodes",
    "Pod": "pods",
    "PodDisruptionBudget": "pdbs",
    "PriorityClass": "priority_classes",
    # the workloads selecting pods: kube-scheduler's system default spread constraints read them
    "Service": "workloads",
    "ReplicaSet": "workloads",
    "StatefulSet": "workloads",
    "ReplicationController": "workloads",
    "PersistentVolume": "persistent_volumes",
    "PersistentVolumeClaim": "persistent_volume_claims",
    "StorageClass": "storage_classes",
    "CSINode": "csi_nodes",
    "CSIDriver": "csi_drivers",
    "CSIStorageCapacity": "csi_storage_capacities",
}


@dataclass(frozen=True)
class ClusterObjects:
    """The objects of a cluster file, by kind, in file order (raw Kubernetes dicts)."""

    nodes: tuple[Obj, ...] = ()
    pods: tuple[Obj, ...] = ()
    pdbs: tuple[Obj, ...] = ()
    priority_classes: tuple[Obj, ...] = ()
    workloads: tuple[Obj, ...] = ()  # Services, ReplicaSets, StatefulSets, ReplicationControllers
    persistent_volumes: tuple[Obj, ...] = ()
    persistent_volume_claims: tuple[Obj, ...] = ()
    storage_classes: tuple[Obj, ...] = ()
    csi_nodes: tuple[Obj, ...] = ()
    csi_drivers: tuple[Obj, ...] = ()
    csi_storage_capacities: tuple[Obj, ...] = ()
    namespaces: tuple[Obj, ...] = ()
    source: str = "<objects>"

    def storage(self) -> tuple[Obj, ...]:
        """The storage objects (StorageClasses, CSIDrivers, CSINodes, CSIStorageCapacities, PVs, PVCs),
        each with its kind."""
        return (
            *self.storage_classes,
            *self.csi_drivers,
            *self.csi_nodes,
            *self.csi_storage_capacities,
            *self.persistent_volumes,
            *self.persistent_volume_claims,
        )


# -- YAML with line numbers and without timestamp conversion -------------------------------------


class _Loader(FastSafeLoader):
    """A safe loader that keeps timestamps as strings and remembers where each mapping starts."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.lines: dict[int, int] = {}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=True)
        self.lines[id(mapping)] = node.start_mark.line + 1
        return mapping


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_mapping)

# where each key of a mapping is written, 1-based: id(mapping) -> key -> (line, column)
KeyMarks = dict[int, dict[Any, tuple[int, int]]]


class _MarkingLoader(_Loader):
    """The loader that also remembers where each key is written. It costs about a tenth more, so a
    text is loaded with it again only to point an error at a field."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.keys: KeyMarks = {}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=True)
        marks: dict[Any, tuple[int, int]] = {}
        for key, _ in node.value:
            marks.setdefault(key.value, (key.start_mark.line + 1, key.start_mark.column + 1))
        self.keys[id(mapping)] = marks
        return mapping


_MarkingLoader.add_constructor("tag:yaml.org,2002:map", _MarkingLoader.construct_mapping)


@dataclass(frozen=True)
class _Located:
    """An object with where it came from, for error messages."""

    obj: Any
    where: str
    keys: KeyMarks | None = None  # where its keys are written, when loaded with _MarkingLoader

    def key_mark(self, source: str, path: Sequence[str | int]) -> str | None:
        """`source:line:column` of the deepest key of `path` written in the text, if known."""
        if self.keys is None:
            return None
        mark: tuple[int, int] | None = None
        value = self.obj
        for part in path:
            if isinstance(value, Mapping):
                mark = self.keys.get(id(value), {}).get(part, mark)
                value = value.get(part)
            elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
                value = value[part]
            else:
                break
        return None if mark is None else f"{source}:{mark[0]}:{mark[1]}"


def _documents(text: str, source: str, marking: bool = False) -> Iterator[_Located]:
    """The top-level documents of a YAML or JSON text (`marking`: with where their keys are)."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            doc = json_loads(text)
        except json.JSONDecodeError as e:
            raise ClusterDataError(f"{source}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
        except ValueError as e:
            raise ClusterDataError(f"{source}: invalid JSON: {e}") from None
        if nested_deeper(doc, MAX_NESTING):  # as a YAML document (every later walk recurses per level)
            raise ClusterDataError(f"{source}: invalid JSON: nested more than {MAX_NESTING} levels deep")
        yield _Located(doc, source)
        return
    loader = _MarkingLoader(text) if marking else _Loader(text)
    keys = loader.keys if isinstance(loader, _MarkingLoader) else None
    try:
        index = 0
        while loader.check_data():
            doc = loader.get_data()
            index += 1
            if doc is None:
                continue
            line = loader.lines.get(id(doc))
            where = f"{source}:{line}" if line else f"{source} (document {index})"
            yield from _with_lines(doc, where, loader.lines, source, keys)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        at = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = getattr(e, "problem", None) or str(e)
        raise ClusterDataError(f"{at}: invalid YAML: {problem}") from None
    finally:
        loader.dispose()


def _with_lines(
    doc: Any, where: str, lines: Mapping[int, int], source: str, keys: KeyMarks | None
) -> Iterator[_Located]:
    """Attach line numbers to a document's items while the loader's line table is valid."""
    if isinstance(doc, Mapping) and isinstance(doc.get("items"), list):
        items = [
            _Located(
                item, f"{source}:{lines[id(item)]}" if id(item) in lines else f"{where} items[{i}]", keys
            )
            for i, item in enumerate(doc["items"])
        ]
        yield _Located({**doc, "items": items}, where, keys)
    else:
        yield _Located(doc, where, keys)


def _objects(located: _Located, default_kind: str | None = None) -> Iterator[_Located]:
    """Flatten lists (`kind: List`, `XList`, a bare JSON array) into single objects."""
    doc = located.obj
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield from _objects(_Located(item, f"{located.where} [{i}]", located.keys))
        return
    if not isinstance(doc, Mapping):
        raise ClusterDataError(f"{located.where}: expected a Kubernetes object, got {type(doc).__name__}")
    kind = doc.get("kind") or default_kind
    if "items" in doc and (kind is None or str(kind).endswith("List")):
        item_kind = str(kind)[: -len("List")] if kind and kind != "List" else None
        for i, item in enumerate(doc.get("items") or []):
            inner = (
                item
                if isinstance(item, _Located)
                else _Located(item, f"{located.where} items[{i}]", located.keys)
            )
            yield from _objects(inner, item_kind or None)
        return
    if not kind:
        raise ClusterDataError(f"{located.where}: object without kind")
    if default_kind and "kind" not in doc:
        doc = {"kind": default_kind, **doc}
    yield _Located(doc, located.where, located.keys)


def _check_object(obj: Mapping[str, Any], where: str) -> Obj:
    """Validate the metadata every object needs; pods get the default namespace."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ClusterDataError(f"{where}: {obj.get('kind')} without metadata.name")
    out = dict(obj)
    if out["kind"] in validation.NAMESPACED and not meta.get("namespace"):
        out["metadata"] = {**meta, "namespace": "default"}
    return out


def _object_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name` for namespaced objects, `name` otherwise."""
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns and obj["kind"] in validation.NAMESPACED else meta["name"]


def _apply_priority(pods: list[Obj], classes: list[Obj], where: Mapping[int, str]) -> list[Obj]:
    """The Priority admission plugin: resolve spec.priority / preemptionPolicy from PriorityClasses."""
    values: dict[str, tuple[int, str | None]] = {
        name: (value, None) for name, value in SYSTEM_PRIORITY_CLASSES.items()
    }
    default: str | None = None
    for pc in classes:
        name = pc["metadata"]["name"]
        values[name] = (int(pc["value"]), pc.get("preemptionPolicy"))  # an integer: validated
        if pc.get("globalDefault"):
            if default is not None:
                raise ClusterDataError(f"priority classes {default} and {name} are both globalDefault")
            default = name
    out: list[Obj] = []
    for i, pod in enumerate(pods):
        spec = pod.get("spec")
        if not isinstance(spec, Mapping) or spec.get("priority") is not None:
            out.append(pod)
            continue
        class_name = spec.get("priorityClassName") or default
        spec = dict(spec)
        if class_name is None:
            spec["priority"] = 0
        elif class_name not in values:
            key = _object_key(pod)
            raise ClusterDataError(f"{where[i]}: pod {key}: no PriorityClass named {class_name!r}")
        else:
            spec["priorityClassName"] = class_name
            spec["priority"], policy = values[class_name]
            if spec.get("preemptionPolicy") is None:
                spec["preemptionPolicy"] = policy or "PreemptLowerPriority"
        out.append({**pod, "spec": spec})
    return out


def _class_defaults(sc: Obj) -> Obj:
    """API defaulting of a StorageClass: volumeBindingMode Immediate, reclaimPolicy Delete."""
    return {"volumeBindingMode": "Immediate", "reclaimPolicy": "Delete", **sc}


def _volume_defaults(pv: Obj) -> Obj:
    """A PV without status gets the phase the PV controller would give it (Bound when claimed, else
    Available)."""
    status = pv.get("status") or {}
    if status.get("phase"):
        return pv
    phase = "Bound" if (pv.get("spec") or {}).get("claimRef") else "Available"
    return {**pv, "status": {**status, "phase": phase}}


def near_kind(kind: str) -> str | None:
    """The kind policyd reads that `kind` is a slip of (a plural, or `slips.near_name` without its
    ratio), or None. Other kinds (Deployment, APIService, ...) are not slips."""
    for known in _KINDS:
        if kind in (known + "s", known + "es"):
            return known
    return near_name(kind, _KINDS, ratio=None)


def _flatten(text: str, source: str, marking: bool = False) -> list[_Located]:
    """The objects of a YAML or JSON text, lists flattened, in file order."""
    located: list[_Located] = []
    for doc in _documents(text, source, marking):
        located.extend(_objects(doc))
    return located


def _field_problems(
    located: Sequence[_Located], source: str, text: str | None, reported: set[tuple[int, str]]
) -> list[validation.Violation]:
    """The fields of the objects that their kinds do not have, and the values of another shape than
    their field's type (`reported`: (object index, field) the schema's checks found already). A slip
    of a known field and a wrong shape are problems, pointed at where they are written (the text
    loaded again to find it); other unknown fields are logged, once per kind and field."""
    found: list[tuple[int, kube_fields.FieldProblem]] = []
    strays: dict[tuple[str, str], list[str]] = {}
    for index, loc in enumerate(located):
        for problem in kube_fields.field_problems(loc.obj):
            if not problem.is_error:
                shape = re.sub(r"\[\d+\]", "[*]", validation.field_path(problem.path))
                strays.setdefault((str(loc.obj.get("kind")), shape), []).append(loc.where)
            elif (index, validation.field_path(problem.path)) not in reported:
                found.append((index, problem))
    for (kind, shape), places in strays.items():
        log.warning(
            "cluster file: unknown field ignored file=%s kind=%s field=%s objects=%d first=%s",
            source,
            kind,
            shape,
            len(places),
            places[0],
        )
    if not found:
        return []
    marked = _flatten(text, source, marking=True) if text is not None else []
    problems = []
    for index, problem in found:
        loc = located[index]
        where = marked[index].key_mark(source, problem.path) if index < len(marked) else None
        problems.append(
            validation.Violation(
                where or loc.where,
                validation.object_name(loc.obj),
                validation.field_path(problem.path),
                problem.message,
            )
        )
    return problems


def _classify(
    located: Sequence[_Located], source: str, text: str | None = None, check_fields: bool = True
) -> ClusterObjects:
    """Sort objects by kind (file order kept), check names, fields and duplicates, resolve priorities
    (`text`: the text the objects were read from, to point at a field; `check_fields`: False for
    objects whose fields their reader checked already, to point at them in its own file)."""
    buckets: dict[str, list[Obj]] = {attr: [] for attr in set(_KINDS.values())}
    pod_where: dict[int, str] = {}
    seen: dict[tuple[str, str], str] = {}
    ignored: Counter[str] = Counter()
    problems: list[validation.Violation] = []
    reported: set[tuple[int, str]] = set()
    for index, loc in enumerate(located):
        kind = str(loc.obj.get("kind"))
        attr = _KINDS.get(kind)
        if attr is None:
            near = near_kind(kind)
            if near is not None:  # a typo would drop the object without a word
                raise ClusterDataError(f"{loc.where}: unknown kind {kind!r}{did_you_mean(near)}")
            ignored[kind] += 1
            continue
        obj = _check_object(loc.obj, loc.where)
        found = validation.violations(obj, loc.where)
        reported.update((index, v.field) for v in found)
        problems.extend(found)
        key = (kind, _object_key(obj))
        if key in seen:
            raise ClusterDataError(f"{loc.where}: duplicate {kind} {key[1]} (first at {seen[key]})")
        seen[key] = loc.where
        if attr == "pods":
            pod_where[len(buckets["pods"])] = loc.where
        buckets[attr].append(obj)
    if check_fields:
        problems.extend(_field_problems(located, source, text, reported))
    if problems:  # every violation of every object, as the API server would have refused them
        raise ClusterDataError("\n".join(str(p) for p in problems))
    for kind, count in sorted(ignored.items()):
        log.info("cluster file: ignored objects file=%s kind=%s count=%d", source, kind, count)
    pods = _apply_priority(buckets["pods"], buckets["priority_classes"], pod_where)
    return ClusterObjects(
        nodes=tuple(buckets["nodes"]),
        pods=tuple(pods),
        pdbs=tuple(buckets["pdbs"]),
        priority_classes=tuple(buckets["priority_classes"]),
        workloads=tuple(buckets["workloads"]),
        persistent_volumes=tuple(_volume_defaults(pv) for pv in buckets["persistent_volumes"]),
        persistent_volume_claims=tuple(buckets["persistent_volume_claims"]),
        storage_classes=tuple(_class_defaults(sc) for sc in buckets["storage_classes"]),
        csi_nodes=tuple(buckets["csi_nodes"]),
        csi_drivers=tuple(buckets["csi_drivers"]),
        csi_storage_capacities=tuple(buckets["csi_storage_capacities"]),
        namespaces=tuple(buckets["namespaces"]),
        source=source,
    )


def load_cluster_text(text: str, source: str = "<input>") -> ClusterObjects:
    """Load cluster objects from YAML or JSON text; errors name `source` and the line."""
    return _classify(_flatten(text, source), source, text)


def load_cluster(path: str) -> ClusterObjects:
    """Load cluster objects from a YAML or JSON file; raises ClusterDataError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ClusterDataError(f"{path}: cannot read cluster file: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ClusterDataError(f"{path}: not UTF-8 text: {e.reason}") from None
    return load_cluster_text(text, path)


def cluster_objects(
    objects: Iterable[Mapping[str, Any]], source: str = "<objects>", check_fields: bool = True
) -> ClusterObjects:
    """Build `ClusterObjects` from in-memory objects (as the loader would from a file; `check_fields`:
    False where the caller checked the objects' fields against the API already)."""
    located: list[_Located] = []
    for i, obj in enumerate(objects):
        located.extend(_objects(_Located(dict(obj), f"{source} [{i}]")))
    return _classify(located, source, check_fields=check_fields)
