"""Kubernetes' image library: `image`, `isImage` and the `containsDigest`, `registry` ... `digest` accessors.

An image reference is parsed as Kubernetes parses it (go-containerregistry's `name.ParseReference`,
default options): as a tag reference, else as a digest reference. A tag reference is
`[registry/]repository[:tag]` (no tag: `latest`); a digest reference is
`[registry/]repository[:tag]@digest`, whose tag is dropped. The first path component is the
registry when it holds a `.` or a `:` (it must then be a valid URI authority); otherwise the
registry is `index.docker.io` (`docker.io` is rewritten to it) and a one-component repository gets
Docker Hub's implicit `library/`. Repositories are 2-255 characters of `a-z0-9_-./`, tags 1-127 of
`A-Za-z0-9_-.`, digests 71 characters of `sh:0-9a-f` (`sha256:` and 64 hex digits). Parsed images
are memoised (they are immutable).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.env import member_overload as _m
from policyd.cel.k8s_lib.url import URLError, parse_authority
from policyd.cel.library_types import IMAGE_TYPE
from policyd.cel.types import BOOL, STRING
from policyd.errors import CelEvalError

DEFAULT_REGISTRY = "index.docker.io"
_REGISTRY_ALIAS = "docker.io"
_DEFAULT_TAG = "latest"
_IMPLICIT_NAMESPACE = "library"
_REPOSITORY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-./")
_TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
_DIGEST_CHARS = frozenset("sh:0123456789abcdef")
_DIGEST_LENGTH = 7 + 64


class ImageError(Exception):
    """A string is not an image reference; `image()` reports only `could not parse reference: <s>`, as
    Kubernetes does (go-containerregistry's ParseReference wraps the part's own reason the same way)."""


@dataclass(frozen=True)
class Image:
    """A `kubernetes.Image` value; equal when every part is (Go compares the whole reference)."""

    image: str  # the text it was parsed from
    registry: str
    repository: str
    identifier: str  # the tag, or the digest when there is one
    tag: str  # "" for a digest reference
    digest: str  # "" for a tag reference
    cel_type_name: ClassVar[str] = IMAGE_TYPE.name

    def __str__(self) -> str:
        return self.image


def _check(kind: str, element: str, allowed: frozenset[str], least: int, most: int) -> None:
    """go-containerregistry's checkElement: `least` to `most` characters, every one of `allowed`."""
    if not least <= len(element) <= most or not allowed.issuperset(element):
        raise ImageError(f"invalid {kind}: {element}")


def _registry(name: str) -> str:
    """The registry of a reference (`name`: its first component, "" when it has none)."""
    try:
        valid = parse_authority(name) == name
    except URLError:
        valid = False
    if not valid:
        raise ImageError(f"registries must be valid RFC 3986 URI authorities: {name}")
    if name in ("", _REGISTRY_ALIAS):
        return DEFAULT_REGISTRY
    return name


def _repository(name: str) -> tuple[str, str]:
    """(registry, repository as `RepositoryStr` gives it) of a repository name."""
    if not name:
        raise ImageError("a repository name must be specified")
    first, slash, rest = name.partition("/")
    registry, repo = (first, rest) if slash and ("." in first or ":" in first) else ("", name)
    _check("repository", repo, _REPOSITORY_CHARS, 2, 255)
    registry = _registry(registry)
    if "/" not in repo and registry == DEFAULT_REGISTRY:  # Docker Hub's implicit namespace
        repo = f"{_IMPLICIT_NAMESPACE}/{repo}"
        _check("repository", repo, _REPOSITORY_CHARS, 2, 255)
    return registry, repo


def _tag_reference(text: str) -> tuple[str, str, str]:
    """(registry, repository, tag) of a tag reference (tag "" when none is given)."""
    base, tag = text, ""
    head, colon, last = text.rpartition(":")
    if colon and "/" not in last:  # not a registry's port
        base, tag = head, last
    if tag:
        _check("tag", tag, _TAG_CHARS, 1, 127)
    return (*_repository(base), tag)


def _digest_reference(text: str) -> tuple[str, str, str]:
    """(registry, repository, digest) of a digest reference (a tag before the digest is dropped)."""
    parts = text.split("@")
    if len(parts) != 2:
        raise ImageError(
            "a digest must contain exactly one '@' separator (e.g. registry/repository@digest) saw: " + text
        )
    base, digest = parts
    _check("digest", digest, _DIGEST_CHARS, _DIGEST_LENGTH, _DIGEST_LENGTH)
    try:
        registry, repo, _tag = _tag_reference(base)
        base = f"{registry}/{repo}"
    except ImageError:
        pass
    return (*_repository(base), digest)


@functools.lru_cache(maxsize=4096)
def parse_image(text: str) -> Image:
    """Parse an image reference as `name.ParseReference`; raises ImageError."""
    try:
        registry, repo, tag = _tag_reference(text)
        tag = tag or _DEFAULT_TAG
        return Image(text, registry, repo, tag, tag, "")
    except ImageError:
        pass
    try:
        registry, repo, digest = _digest_reference(text)
        return Image(text, registry, repo, digest, "", digest)
    except ImageError:
        raise ImageError(f"could not parse reference: {text}") from None


def image(text: Any) -> Image:
    """`image(string)`: the parsed reference; an error when it is none."""
    if type(text) is not str:
        raise rt.no_overload("image", text)
    try:
        return parse_image(text)
    except ImageError as e:
        raise CelEvalError(str(e)) from None


def is_image(text: Any) -> bool:
    """`isImage(string)`."""
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
        FunctionDecl("image", (Overload("string_to_image", (STRING,), IMAGE_TYPE, impl=image),)),
        FunctionDecl("isImage", (Overload("is_image_string", (STRING,), BOOL, impl=is_image),)),
        accessor("containsDigest", "image_contains_digest", BOOL, lambda i: i.digest != ""),
        accessor("registry", "image_registry", STRING, lambda i: i.registry),
        accessor("repository", "image_repository", STRING, lambda i: i.repository),
        accessor("identifier", "image_identifier", STRING, lambda i: i.identifier),
        accessor("tag", "image_tag", STRING, lambda i: i.tag),
        accessor("digest", "image_digest", STRING, lambda i: i.digest),
    ]
    return {d.name: d for d in decls}
