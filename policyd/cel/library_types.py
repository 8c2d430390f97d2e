"""The opaque types the CEL libraries add, by type name (`type(ip('::1')) == net.IP`).

The checker and the code generator resolve these names as type identifiers, like `int` or
`google.protobuf.Timestamp`; a runtime value names its type with a `cel_type_name` class attribute.
"""

from __future__ import annotations

from policyd.cel.types import OpaqueType

IP_TYPE = OpaqueType("net.IP")
CIDR_TYPE = OpaqueType("net.CIDR")
QUANTITY_TYPE = OpaqueType("kubernetes.Quantity")
URL_TYPE = OpaqueType("kubernetes.URL")
SEMVER_TYPE = OpaqueType("kubernetes.Semver")
FORMAT_TYPE = OpaqueType("kubernetes.NamedFormat")
IMAGE_TYPE = OpaqueType("kubernetes.Image")

LIBRARY_TYPES: dict[str, OpaqueType] = {
    t.name: t for t in (IP_TYPE, CIDR_TYPE, QUANTITY_TYPE, URL_TYPE, SEMVER_TYPE, FORMAT_TYPE, IMAGE_TYPE)
}
"""Type name -> the library type it denotes."""
