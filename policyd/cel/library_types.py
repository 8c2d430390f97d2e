"""The opaque types the CEL libraries add, by type name (`type(ip('::1')) == net.IP`).

The checker and the code generator resolve these names as type identifiers, like `int` or
`google.protobuf.Timestamp`; a runtime value names its type with a `cel_type_name` class attribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policyd.cel.types import CelType, OpaqueType

IP_TYPE = OpaqueType("net.IP")
CIDR_TYPE = OpaqueType("net.CIDR")
QUANTITY_TYPE = OpaqueType("kubernetes.Quantity")
URL_TYPE = OpaqueType("kubernetes.URL")
SEMVER_TYPE = OpaqueType("kubernetes.Semver")
FORMAT_TYPE = OpaqueType("kubernetes.NamedFormat")

LIBRARY_TYPES: dict[str, OpaqueType] = {
    t.name: t for t in (IP_TYPE, CIDR_TYPE, QUANTITY_TYPE, URL_TYPE, SEMVER_TYPE, FORMAT_TYPE)
}
"""Type name -> the library type it denotes."""

OPTIONAL_TYPE_NAME = "optional_type"


def optional_type(of: CelType) -> OpaqueType:
    """`optional_type(T)`, the type of `format.named(...)` and `<Format>.validate(...)`."""
    return OpaqueType(OPTIONAL_TYPE_NAME, (of,))


@dataclass(frozen=True)
class OptionalResult:
    """An optional value returned by a library function: `value` when `present`, else none.

    The same shape (`value`, `present`) as the language's optional value (cel-go's optional
    library); a library function returns this until both are one class.
    """

    value: object
    present: bool
    cel_type_name: ClassVar[str] = OPTIONAL_TYPE_NAME


OPTIONAL_NONE = OptionalResult(None, False)
