"""cel-go's encoders extension: `base64.encode(bytes)` and `base64.decode(string)`.

Decoding accepts standard base64 with or without padding (Go's StdEncoding, then RawStdEncoding);
line breaks are ignored; anything else outside the alphabet is an error.
"""

from __future__ import annotations

import base64
import binascii
import functools
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.types import BYTES, STRING
from policyd.errors import CelEvalError


def encode(data: Any) -> str:
    """`base64.encode(bytes)`: standard base64 with padding."""
    if type(data) is not bytes:
        raise rt.no_overload("base64.encode", data)
    return base64.b64encode(data).decode("ascii")


def decode(text: Any) -> bytes:
    """`base64.decode(string)`: padded or unpadded standard base64."""
    if type(text) is not str:
        raise rt.no_overload("base64.decode", text)
    body = text.replace("\r", "").replace("\n", "")
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        pass
    if "=" not in body and len(body) % 4 != 1:
        try:
            return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
        except (binascii.Error, ValueError):
            pass
    raise CelEvalError(f"illegal base64 data in {text!r}")


@functools.cache
def encoder_functions() -> dict[str, FunctionDecl]:
    """The encoders extension's declarations, by (namespaced) function name."""
    decls = [
        FunctionDecl("base64.encode", (Overload("base64_encode_bytes", (BYTES,), STRING, impl=encode),)),
        FunctionDecl("base64.decode", (Overload("base64_decode_string", (STRING,), BYTES, impl=decode),)),
    ]
    return {d.name: d for d in decls}
