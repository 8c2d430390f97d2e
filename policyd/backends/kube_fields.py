"""The fields of the kinds a cluster file holds, as the `kubernetes` client's models declare them,
and the fields of an object that are none of them or hold a value of another shape.

The API server refuses an unknown field on create (strict field validation, kubectl's default), and a
cluster file stands for what an API server holds, so an unknown field is reported, never dropped in
silence. One that is a slip of a field known at its place (`nodeNme`, `Operator`, `tolerationSecond`)
is an error: the file would mean something else than its author wrote. Another may be a field of a
newer API than the installed client knows (a snapshot of a newer cluster), so the loader warns. A
value of another shape than its field's type (a list for an object, a string for a boolean) is an
error, as the API server cannot decode it; the code reading objects may then trust their shapes.

The table is derived from the installed client's model classes (their `openapi_types` and
`attribute_map`) on first use, and kept in the user's cache directory under the client's version:
deriving it took 0.44-0.58 s in six runs here (most of it importing the models), reading the kept
table 2.5 ms (the version is read from the package's metadata, without importing it).
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from policyd.slips import near_name
from policyd.user_cache import cache_directory

__all__ = [
    "KINDS",
    "FieldProblem",
    "UnknownField",
    "WrongShape",
    "field_problems",
    "field_table",
]

# the kinds a cluster file holds, each read as the client's V1 model of that name
KINDS = (
    "Namespace",
    "Node",
    "Pod",
    "PodDisruptionBudget",
    "PriorityClass",
    "Service",
    "ReplicaSet",
    "StatefulSet",
    "ReplicationController",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "StorageClass",
    "CSINode",
    "CSIDriver",
    "CSIStorageCapacity",
)
_LIST, _MAP = "List[", "Dict[str, "
_FORMAT = 1  # of the kept file: raise to make every kept table stale

# model name -> JSON field name -> the field's type, in the client's notation (`V1PodSpec`,
# `List[V1Toleration]`, `Dict[str, str]`, `str`, `object` for anything)
Table = dict[str, dict[str, str]]


@dataclass(frozen=True)
class UnknownField:
    """A field of an object that its kind does not have at that place."""

    path: tuple[str | int, ...]  # from the object's top to the field, the field's name last
    near: str | None  # the known field at that place it is a slip of, if any

    @property
    def name(self) -> str:
        """The field's name as written."""
        return str(self.path[-1])

    @property
    def is_error(self) -> bool:
        """A slip of a known field is an error; another unknown field (a newer API's) a warning."""
        return self.near is not None

    @property
    def message(self) -> str:
        """What is wrong, in the API server's words, with the field meant when there is one."""
        if self.near is not None:
            return f'unknown field "{self.name}" (did you mean "{self.near}"?)'
        return f'unknown field "{self.name}" (not in the installed Kubernetes client\'s API)'


@dataclass(frozen=True)
class WrongShape:
    """A value of another shape than its field's type (a list where an object goes, a number where
    a boolean goes): the API server refuses to decode it."""

    path: tuple[str | int, ...]
    value: Any
    expected: str  # in JSON Schema's words: object, array, string, integer, number, boolean

    is_error = True  # the API server cannot decode the value

    @property
    def message(self) -> str:
        """What is wrong, in the API server's words."""
        return f"Invalid value: {json.dumps(self.value, default=str)}: must be of type {self.expected}"


FieldProblem = UnknownField | WrongShape

# the client's scalar types: the JSON values each accepts, and its name in messages
_NUMBER = (int, float)
_SCALARS: dict[str, tuple[tuple[type, ...], str]] = {
    # a quantity is a `str` in the client's models, and JSON numbers decode to one (`cpu: 4`)
    "str": ((str, int, float), "string"),
    "int": ((int,), "integer"),
    "float": (_NUMBER, "number"),
    "bool": ((bool,), "boolean"),
    # a YAML timestamp read by a YAML 1.1 loader is a datetime
    "datetime": ((str, datetime.date), "string"),
}


def _element(type_: str) -> str:
    """The model a field's type holds (`V1Toleration` of `List[V1Toleration]`), or the scalar."""
    while True:
        if type_.startswith(_LIST):
            type_ = type_[len(_LIST) : -1]
        elif type_.startswith(_MAP):
            type_ = type_[len(_MAP) : -1]
        else:
            return type_


def derive_table() -> Table:
    """The fields of every model reachable from `KINDS`, read from the installed client's models."""
    from kubernetes.client import models  # noqa: PLC0415 - slow to import: only when no table is kept

    table: Table = {}
    todo = [f"V1{kind}" for kind in KINDS]
    while todo:
        name = todo.pop()
        if name in table:
            continue
        model = getattr(models, name)
        fields = {model.attribute_map[attr]: type_ for attr, type_ in model.openapi_types.items()}
        table[name] = fields
        todo.extend(inner for inner in map(_element, fields.values()) if hasattr(models, inner))
    return table


def _kept_path() -> str | None:
    directory = cache_directory()
    if directory is None:
        return None
    try:
        version = importlib.metadata.version("kubernetes")
    except importlib.metadata.PackageNotFoundError:
        return None
    return os.path.join(directory, f"kube-fields-{version}-{_FORMAT}.json")


def _read(path: str) -> Table | None:
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except (OSError, ValueError):
        return None
    complete = isinstance(table, dict) and all(f"V1{kind}" in table for kind in KINDS)
    return table if complete else None


def _keep(path: str, table: Table) -> None:
    """Write the table beside its final name, then move it there: a reader never sees half a file."""
    try:
        fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".partial")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(table, f, separators=(",", ":"), sort_keys=True)
        os.replace(partial, path)
    except OSError:
        pass  # a read-only or full disk: derived again next time


@functools.cache
def field_table() -> Table:
    """The field table: the kept one of the installed client's version, else derived (and kept)."""
    path = _kept_path()
    table = _read(path) if path is not None else None
    if table is None:
        table = derive_table()
        if path is not None:
            _keep(path, table)
    return table


def field_problems(obj: Mapping[str, Any], table: Table | None = None) -> list[FieldProblem]:
    """The fields of `obj` (a cluster-file object of one of `KINDS`) that its kind does not have and
    the values whose shape is not their field's type, in file order; [] for other kinds. A null is
    the field left out, as the API server reads it."""
    kind = obj.get("kind")
    if kind not in KINDS:
        return []
    return list(_walk(obj, f"V1{kind}", (), table if table is not None else field_table()))


def _shape(value: Any, type_: str, table: Table) -> str | None:
    """The JSON type `value` should have for the client's type `type_`, when it has another."""
    if value is None:
        return None
    if type_.startswith(_LIST):
        return None if isinstance(value, list) else "array"
    if type_.startswith(_MAP) or type_ in table:
        return None if isinstance(value, Mapping) else "object"
    scalar = _SCALARS.get(type_)
    if scalar is None:  # `object` (IntOrString, RawExtension, ...), `bytes`, or a type not known here
        return None
    accepted, name = scalar
    if isinstance(value, bool) and type_ != "bool":
        return name
    if type_ == "int" and isinstance(value, float) and value.is_integer():
        return None  # 5.0 is an integer to JSON Schema (the cluster schema's checks) too
    return None if isinstance(value, accepted) else name


def _walk(value: Any, type_: str, path: tuple[str | int, ...], table: Table) -> Iterator[FieldProblem]:
    expected = _shape(value, type_, table)
    if expected is not None:
        yield WrongShape(path, value, expected)
        return
    if type_.startswith(_LIST):
        if isinstance(value, list):
            inner = type_[len(_LIST) : -1]
            for i, item in enumerate(value):
                yield from _walk(item, inner, (*path, i), table)
        return
    if type_.startswith(_MAP):
        if isinstance(value, Mapping):
            inner = type_[len(_MAP) : -1]
            for key, item in value.items():
                yield from _walk(item, inner, (*path, str(key)), table)
        return
    fields = table.get(type_)
    if fields is None or not isinstance(value, Mapping):
        return  # a scalar, `object` (anything), or null
    for key, item in value.items():
        field = fields.get(key) if isinstance(key, str) else None
        if field is None:
            yield UnknownField((*path, str(key)), near_name(str(key), fields))
        else:
            yield from _walk(item, field, (*path, key), table)
