"""Kubernetes' image library: `image(s)`, `image(s, normalize)`, `isImage` and the accessors
`containsDigest`, `registry`, `repository`, `identifier`, `tag` and `digest`.

A reference is parsed as Kubernetes' library parses it, with github.com/distribution/reference:
`[domain/]path[:tag][@digest]`, where the domain is a host name (components of `a-zA-Z0-9-`, joined by
`.`), an IPv4 address or a bracketed IPv6 address, with an optional `:port`; the path is one or more
`/`-separated components of lower-case letters and digits joined by `.`, `_`, `__` or dashes (at most
255 characters); a tag is `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`; a digest is `algorithm:hex`, checked as
go-digest does (sha256, sha384 or sha512, with 64, 96 or 128 lower-case hex digits).

`image(s)` and `image(s, false)` take the reference as written (`reference.Parse`): the first path
component is the domain whenever a `/` follows it (`team/app` has the domain `team`), no domain is
the registry "", and a reference with neither tag nor digest has an empty tag and identifier.
`image(s, true)` normalizes it first (`reference.ParseNormalizedNamed`): a first component is the
registry only when it holds a `.` or a `:`, is `localhost` or holds an upper-case letter, else the
registry is `docker.io` (`index.docker.io` is rewritten to it), where a one-component path gets
Docker Hub's `library/`; and a reference with neither tag nor digest gets the tag `latest`.
`identifier()` is the digest when there is one, else the tag. A tag before a digest is kept. A string
that is no reference is an error for `image` (`failed to parse image: <s>, err: <reason>`) and false
for `isImage` (which does not normalize). Parsed images are memoised (they are immutable).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import re2

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.env import member_overload as _m
from policyd.cel.library_types import IMAGE_TYPE
from policyd.cel.types import BOOL, STRING
from policyd.errors import CelEvalError

DEFAULT_DOMAIN = "docker.io"
_LEGACY_DOMAIN = "index.docker.io"
_LOCALHOST = "localhost"
_OFFICIAL_PREFIX = "library/"
DEFAULT_TAG = "latest"
MAX_PATH_LENGTH = 255

# distribution/reference's grammar (regexp.go)
_PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_REMOTE_NAME = f"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = f"(?:{_DOMAIN_COMPONENT}(?:\\.{_DOMAIN_COMPONENT})*|\\[(?:[a-fA-F0-9:]+)\\])"
_DOMAIN_AND_PORT = f"{_HOST}(?::[0-9]+)?"
_TAG = "[\\w][\\w.-]{0,127}"
_DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}"
_REFERENCE = re2.compile(f"^((?:{_DOMAIN_AND_PORT}/)?{_REMOTE_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?$")
_NAME = re2.compile(f"^(?:({_DOMAIN_AND_PORT})/)?({_REMOTE_NAME})$")
_IDENTIFIER = re2.compile("^[a-f0-9]{64}$")
# go-digest's algorithms (the library imports crypto/sha256 and crypto/sha512) and their hex lengths
_DIGEST_HEX_LENGTH = {"sha256": 64, "sha384": 96, "sha512": 128}
_DIGEST_ANY = re2.compile("^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$")
_LOWER_HEX = frozenset("0123456789abcdef")


class ImageError(Exception):
    """A string is not an image reference; the text is distribution/reference's (or go-digest's)."""


@dataclass(frozen=True)
class Image:
    """A `kubernetes.Image` value; equal when every part is (Go compares the whole reference)."""

    image: str  # the reference as distribution/reference writes it (normalized: with `:latest` added)
    registry: str
    repository: str
    identifier: str  # the digest when there is one, else the tag
    tag: str
    digest: str
    cel_type_name: ClassVar[str] = IMAGE_TYPE.name

    def __str__(self) -> str:
        return self.image


def _check_digest(text: str) -> None:
    """go-digest's Digest.Validate."""
    algorithm, colon, encoded = text.partition(":")
    if not algorithm or not colon or not encoded:
        raise ImageError("invalid checksum digest format")
    length = _DIGEST_HEX_LENGTH.get(algorithm)
    if length is None:
        if _DIGEST_ANY.search(text) is None:
            raise ImageError("invalid checksum digest format")
        raise ImageError("unsupported digest algorithm")
    if len(encoded) != length:
        raise ImageError("invalid checksum digest length")
    if not _LOWER_HEX.issuperset(encoded):
        raise ImageError("invalid checksum digest format")


def _parse(text: str) -> tuple[str, str, str, str]:
    """reference.Parse: (domain, path, tag, digest); raises ImageError with its reason."""
    m = _REFERENCE.search(text)
    if m is None:
        if text == "":
            raise ImageError("repository name must have at least one component")
        if _REFERENCE.search(text.lower()) is not None:
            raise ImageError("repository name must be lowercase")
        raise ImageError("invalid reference format")
    name = _NAME.search(m.group(1))
    domain, path = (name.group(1) or "", name.group(2)) if name is not None else ("", m.group(1))
    if len(path) > MAX_PATH_LENGTH:
        raise ImageError(f"repository name must not be more than {MAX_PATH_LENGTH} characters")
    digest = m.group(3) or ""
    if digest:
        _check_digest(digest)
    return domain, path, m.group(2) or "", digest


def _split_docker_domain(text: str) -> tuple[str, str]:
    """splitDockerDomain: (domain, the rest) of a reference to normalize."""
    first, slash, rest = text.partition("/")
    if not slash:
        return DEFAULT_DOMAIN, _OFFICIAL_PREFIX + text
    if first == _LOCALHOST or "." in first or ":" in first or first.lower() != first:
        domain, rest = (DEFAULT_DOMAIN if first == _LEGACY_DOMAIN else first), rest
    else:
        domain, rest = DEFAULT_DOMAIN, text
    if domain == DEFAULT_DOMAIN and "/" not in rest:
        rest = _OFFICIAL_PREFIX + rest
    return domain, rest


def _parse_normalized(text: str) -> tuple[str, str, str, str]:
    """reference.ParseNormalizedNamed: (domain, path, tag, digest); raises ImageError."""
    if _IDENTIFIER.search(text) is not None:
        raise ImageError(f"invalid repository name ({text}), cannot specify 64-byte hexadecimal strings")
    domain, rest = _split_docker_domain(text)
    remote = rest.partition(":")[0]
    if remote.lower() != remote:
        raise ImageError(f"invalid reference format: repository name ({remote}) must be lowercase")
    return _parse(f"{domain}/{rest}")


@functools.lru_cache(maxsize=4096)
def parse_image(text: str, normalize: bool = False) -> Image:
    """The image `image(text, normalize)` gives; raises ImageError (Kubernetes' message)."""
    try:
        domain, path, tag, digest = _parse_normalized(text) if normalize else _parse(text)
    except ImageError as e:
        raise ImageError(f"failed to parse image: {text}, err: {e}") from None
    written = f"{domain}/{path}" if domain else path
    if tag:
        written += f":{tag}"
    if digest:
        written += f"@{digest}"
    if normalize and not tag and not digest:
        tag = DEFAULT_TAG
        written += f":{DEFAULT_TAG}"
    return Image(written, domain, path, digest or tag, tag, digest)


def image(text: Any, normalize: Any = False) -> Image:
    """`image(string)` / `image(string, bool)`: the parsed reference; an error when it is none."""
    if type(text) is not str or type(normalize) is not bool:
        raise rt.no_overload("image", text, normalize)
    try:
        return parse_image(text, normalize)
    except ImageError as e:
        raise CelEvalError(str(e)) from None


def is_image(text: Any) -> bool:
    """`isImage(string)`: whether `image(string)` would succeed."""
    if type(text) is not str:
        raise rt.no_overload("isImage", text)
    try:
        parse_image(text)
    except ImageError:
        return False
    return True


@functools.cache
def image_functions() -> dict[str, FunctionDecl]:
    """The image library's declarations, by function name."""

    def accessor(name: str, oid: str, result: Any, read: Any) -> FunctionDecl:
        return FunctionDecl(
            name, (_m(oid, (IMAGE_TYPE,), result, lambda v: read(rt.receiver(v, Image, name))),)
        )

    decls = [
        FunctionDecl(
            "image",
            (
                Overload("string_to_image", (STRING,), IMAGE_TYPE, impl=image),
                Overload("string_bool_to_image", (STRING, BOOL), IMAGE_TYPE, impl=image),
            ),
        ),
        FunctionDecl("isImage", (Overload("is_image_string", (STRING,), BOOL, impl=is_image),)),
        accessor("containsDigest", "image_contains_digest", BOOL, lambda i: i.digest != ""),
        accessor("registry", "image_registry", STRING, lambda i: i.registry),
        accessor("repository", "image_repository", STRING, lambda i: i.repository),
        accessor("identifier", "image_identifier", STRING, lambda i: i.identifier),
        accessor("tag", "image_tag", STRING, lambda i: i.tag),
        accessor("digest", "image_digest", STRING, lambda i: i.digest),
    ]
    return {d.name: d for d in decls}
