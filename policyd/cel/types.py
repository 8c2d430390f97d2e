"""CEL static types: primitives, lists, maps, declared object types, opaque types, type parameters.

Runtime representation of values (the contract between generated code, the cluster functions and the
conformance harness):

| CEL type      | Python value                                         |
|---------------|------------------------------------------------------|
| null_type     | None                                                 |
| bool          | bool                                                 |
| int           | int (checked to int64 range by every operation)      |
| uint          | policyd.cel.values.UInt (int subclass)      |
| double        | float                                                |
| string        | str                                                  |
| bytes         | bytes                                                |
| list(T)       | list or tuple                                        |
| map(K, V)     | dict (or any Mapping)                                |
| object types  | dict (or any Mapping) keyed by field name; an absent field reads as its type's zero value, |
|               | `has()` tests presence                               |
| timestamp     | cel_values.Timestamp                                 |
| duration      | cel_values.Duration                                  |
| type          | cel_values.TypeValue                                 |
| opaque (e.g. kubernetes quantity) | its own Python class                  |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from policyd.cel.values import UInt


@dataclass(frozen=True)
class CelType:
    """Base of all static CEL types."""

    def is_assignable_from(self, other: CelType) -> bool:
        """True when a value of `other` may stand where `self` is expected."""
        if isinstance(self, DynType) or isinstance(other, DynType):
            return True
        if isinstance(other, ErrorType) or isinstance(self, ErrorType):
            return True
        return self == other


@dataclass(frozen=True)
class PrimitiveType(CelType):
    """int, uint, double, bool, string, bytes, null_type, timestamp, duration."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class DynType(CelType):
    """`dyn`: checked at run time."""

    def __str__(self) -> str:
        return "dyn"


@dataclass(frozen=True)
class ErrorType(CelType):
    """The type of an expression that already failed to check (suppresses cascades)."""

    def __str__(self) -> str:
        return "*error*"


@dataclass(frozen=True)
class ListType(CelType):
    """list(elem)."""

    elem: CelType

    def __str__(self) -> str:
        return f"list({self.elem})"

    def is_assignable_from(self, other: CelType) -> bool:
        if isinstance(other, ListType):
            return self.elem.is_assignable_from(other.elem)
        return super().is_assignable_from(other)


@dataclass(frozen=True)
class MapType(CelType):
    """map(key, value)."""

    key: CelType
    value: CelType

    def __str__(self) -> str:
        return f"map({self.key}, {self.value})"

    def is_assignable_from(self, other: CelType) -> bool:
        if isinstance(other, MapType):
            return self.key.is_assignable_from(other.key) and self.value.is_assignable_from(other.value)
        return super().is_assignable_from(other)


@dataclass(frozen=True)
class TypeType(CelType):
    """type(T): the type of type values."""

    of: CelType | None = None

    def __str__(self) -> str:
        return f"type({self.of})" if self.of is not None else "type"

    def is_assignable_from(self, other: CelType) -> bool:
        if isinstance(other, TypeType):
            return True
        return super().is_assignable_from(other)


@dataclass(frozen=True)
class TypeParam(CelType):
    """A type parameter (`A`, `K`, `V`) in a function overload signature."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class OpaqueType(CelType):
    """An abstract type with a name and parameters, e.g. `kubernetes.Quantity`, `optional_type(T)`."""

    name: str
    params: tuple[CelType, ...] = ()

    def __str__(self) -> str:
        if self.params:
            return f"{self.name}({', '.join(map(str, self.params))})"
        return self.name


@dataclass(frozen=True, eq=False)
class ObjectType(CelType):
    """A declared record type (Kubernetes object shapes, policyd objects); runtime value is a dict.

    `fields` maps each field name to its type. Fields are resolved lazily through `field_types()` so
    types can be recursive (set `fields_factory` instead of `fields`).
    """

    name: str
    fields: Mapping[str, CelType] = field(default_factory=dict)
    doc: str = ""
    # field name -> one-line description, for `policyd explain`/docs and lint messages
    field_docs: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name

    def __hash__(self) -> int:
        return hash(("object", self.name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectType) and other.name == self.name

    def field_type(self, name: str) -> CelType | None:
        """The declared type of field `name`, or None if the object has no such field."""
        return self.fields.get(name)


INT = PrimitiveType("int")
UINT = PrimitiveType("uint")
DOUBLE = PrimitiveType("double")
BOOL = PrimitiveType("bool")
STRING = PrimitiveType("string")
BYTES = PrimitiveType("bytes")
NULL = PrimitiveType("null_type")
TIMESTAMP = PrimitiveType("google.protobuf.Timestamp")
DURATION = PrimitiveType("google.protobuf.Duration")
DYN = DynType()
ERROR = ErrorType()
TYPE = TypeType()

NUMERIC = (INT, UINT, DOUBLE)


def list_of(elem: CelType) -> ListType:
    """list(elem)."""
    return ListType(elem)


def map_of(key: CelType, value: CelType) -> MapType:
    """map(key, value)."""
    return MapType(key, value)


def zero_value(t: CelType) -> object:
    """The value an absent field of type `t` reads as (protobuf default semantics)."""
    if t == INT:
        return 0
    if t == UINT:
        return UInt(0)
    if t == DOUBLE:
        return 0.0
    if t == BOOL:
        return False
    if t == STRING:
        return ""
    if t == BYTES:
        return b""
    if isinstance(t, ListType):
        return ()
    if isinstance(t, MapType | ObjectType):
        return _EMPTY_MAP
    return None


class _FrozenEmptyMap(dict):  # type: ignore[type-arg]
    """An immutable empty dict used as the shared zero value of maps and objects."""

    def __setitem__(self, key: object, value: object) -> None:  # pragma: no cover - defensive
        raise TypeError("immutable")


_EMPTY_MAP: dict[object, object] = _FrozenEmptyMap()
