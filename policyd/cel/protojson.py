"""cel.expr.Value in protobuf JSON form (as CEL's conformance service uses) <-> CEL runtime values."""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    STRING,
    TIMESTAMP,
    UINT,
    CelType,
    ListType,
    MapType,
    TypeType,
)
from policyd.cel.values import (
    Duration,
    Quantity,
    Timestamp,
    TypeValue,
    UInt,
    parse_duration,
    parse_timestamp,
)
from policyd.errors import CelEvalError, PolicydError

TS_URL = "type.googleapis.com/google.protobuf.Timestamp"
DUR_URL = "type.googleapis.com/google.protobuf.Duration"

_WRAPPERS = {
    "google.protobuf.Int64Value": "int",
    "google.protobuf.Int32Value": "int",
    "google.protobuf.UInt64Value": "uint",
    "google.protobuf.UInt32Value": "uint",
    "google.protobuf.DoubleValue": "double",
    "google.protobuf.FloatValue": "double",
    "google.protobuf.StringValue": "string",
    "google.protobuf.BoolValue": "bool",
    "google.protobuf.BytesValue": "bytes",
}


class ProtoJsonError(PolicydError):
    """A cel.expr.Value JSON document could not be understood."""


def _double_from_json(v: Any) -> float:
    if isinstance(v, str):
        if v == "NaN":
            return math.nan
        if v == "Infinity":
            return math.inf
        if v == "-Infinity":
            return -math.inf
        return float(v)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ProtoJsonError(f"invalid doubleValue {v!r}")
    return float(v)


def _json_value_to_cel(v: Any) -> Any:
    """google.protobuf.Value JSON (plain JSON) -> CEL value."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, list):
        return [_json_value_to_cel(x) for x in v]
    if isinstance(v, dict):
        return {k: _json_value_to_cel(x) for k, x in v.items()}
    raise ProtoJsonError(f"invalid JSON value {v!r}")


def _object_from_json(obj: Mapping[str, Any]) -> Any:
    url = str(obj.get("@type", ""))
    name = url.rsplit("/", 1)[-1]
    value = obj.get("value")
    if name == "google.protobuf.Timestamp":
        return parse_timestamp(str(value))
    if name == "google.protobuf.Duration":
        return parse_duration(str(value))
    if name in _WRAPPERS:
        kind = _WRAPPERS[name]
        if kind == "int":
            return int(value if value is not None else 0)
        if kind == "uint":
            return UInt(int(value if value is not None else 0))
        if kind == "double":
            return _double_from_json(value if value is not None else 0.0)
        if kind == "bytes":
            return base64.b64decode(str(value or ""))
        if kind == "bool":
            return bool(value)
        return str(value or "")
    if name == "google.protobuf.Value":
        return _json_value_to_cel(value)
    if name == "google.protobuf.Struct":
        return _json_value_to_cel(value if value is not None else {})
    if name == "google.protobuf.ListValue":
        return _json_value_to_cel(value if value is not None else [])
    raise ProtoJsonError(f"unsupported object type {url!r}")


def from_json(value: Mapping[str, Any]) -> Any:
    """A cel.expr.Value protojson object -> the CEL runtime value."""
    if not isinstance(value, Mapping):
        raise ProtoJsonError(f"expected a cel.expr.Value object, got {value!r}")
    try:
        if "nullValue" in value:
            return None
        if "boolValue" in value:
            return bool(value["boolValue"])
        if "int64Value" in value:
            return rt.check_int(int(value["int64Value"]))
        if "uint64Value" in value:
            return UInt(int(value["uint64Value"]))
        if "doubleValue" in value:
            return _double_from_json(value["doubleValue"])
        if "stringValue" in value:
            return str(value["stringValue"])
        if "bytesValue" in value:
            return base64.b64decode(str(value["bytesValue"]))
        if "listValue" in value:
            return [from_json(x) for x in (value["listValue"] or {}).get("values", [])]
        if "mapValue" in value:
            out: dict[Any, Any] = {}
            for entry in (value["mapValue"] or {}).get("entries", []):
                out = rt.map_with(out, from_json(entry["key"]), from_json(entry["value"]))
            return out
        if "typeValue" in value:
            return TypeValue(str(value["typeValue"]))
        if "objectValue" in value:
            return _object_from_json(value["objectValue"])
        if "enumValue" in value:
            return int(value["enumValue"].get("value", 0))
    except (ValueError, TypeError, KeyError, CelEvalError) as e:
        raise ProtoJsonError(f"invalid cel.expr.Value: {e}") from None
    raise ProtoJsonError(f"unsupported cel.expr.Value {dict(value)!r}")


def _double_to_json(f: float) -> float | str:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def to_json(v: Any) -> dict[str, Any]:
    """A CEL runtime value -> cel.expr.Value protojson."""
    t = type(v)
    if v is None:
        return {"nullValue": None}
    if t is bool:
        return {"boolValue": v}
    if t is UInt:
        return {"uint64Value": str(int(v))}
    if t is int or (isinstance(v, int) and t is not bool):
        return {"int64Value": str(int(v))}
    if t is float:
        return {"doubleValue": _double_to_json(v)}
    if t is str:
        return {"stringValue": v}
    if t is bytes:
        return {"bytesValue": base64.b64encode(v).decode("ascii")}
    if isinstance(v, list | tuple):
        return {"listValue": {"values": [to_json(x) for x in v]}}
    if isinstance(v, Mapping):
        return {"mapValue": {"entries": [{"key": to_json(k), "value": to_json(x)} for k, x in v.items()]}}
    if t is TypeValue:
        return {"typeValue": v.name}
    if t is Timestamp:
        return {"objectValue": {"@type": TS_URL, "value": str(v)}}
    if t is Duration:
        return {"objectValue": {"@type": DUR_URL, "value": str(v)}}
    if t is Quantity:
        return {"stringValue": str(v)}
    raise ProtoJsonError(f"cannot encode a value of type {rt.type_name(v)}")


def infer_type(v: Any) -> CelType:
    """A static type to declare a binding with, inferred from its value (containers: dyn elements)."""
    t = type(v)
    simple: dict[type, CelType] = {
        bool: BOOL,
        int: INT,
        UInt: UINT,
        float: DOUBLE,
        str: STRING,
        bytes: BYTES,
        Timestamp: TIMESTAMP,
        Duration: DURATION,
    }
    if t in simple:
        return simple[t]
    if v is None:
        return NULL
    if isinstance(v, list | tuple):
        return ListType(DYN)
    if isinstance(v, Mapping):
        return MapType(DYN, DYN)
    if t is TypeValue:
        return TypeType()
    return DYN


def same_value(a: Any, b: Any) -> bool:
    """Strict structural equality for tests: types must match (1 != 1u != 1.0); NaN equals NaN."""
    if rt.type_name(a) != rt.type_name(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping):
        if len(a) != len(b):
            return False
        for k, x in a.items():
            found, y = rt.map_lookup(b, k)
            if not found or not same_value(x, y):
                return False
        return True
    return bool(a == b)
