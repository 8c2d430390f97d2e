"""Kubernetes' image and pod libraries (cases from k8s.io/apiserver/pkg/cel/library, and edges)."""

from __future__ import annotations

from typing import Any

import pytest

from policyd.cel.k8s_lib.image import ImageError, parse_image
from policyd.cel.program import CelCompileError, compile_expression
from policyd.cel.types import DYN
from policyd.errors import CelEvalError
from tests.unit.cel.library_cases import ENV, ev

DIGEST = "sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2"
K8S = "registry.k8s.io/kube-apiserver-arm64"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f'isImage("{K8S}:latest")', True),
        (f'isImage("{K8S}:@")', False),
        (f'image("{K8S}").containsDigest()', False),
        (f'image("{K8S}:latest@{DIGEST}").containsDigest()', True),
        (f'image("{K8S}").registry() == "registry.k8s.io"', True),
        (f'image("{K8S}").repository() == "kube-apiserver-arm64"', True),
        (f'image("{K8S}").identifier()', ""),  # as written: no tag is no tag
        (f'image("{K8S}", true).identifier()', "latest"),
        (f'image("{K8S}:testtag").identifier()', "testtag"),
        (f'image("{K8S}:latest@{DIGEST}").identifier()', DIGEST),
        (f'image("{K8S}:latest@{DIGEST}").tag()', "latest"),  # a tag before a digest is kept
        (f'image("{K8S}@{DIGEST}").tag()', ""),
        (f'image("{K8S}:testtag").digest()', ""),
        # as written, a first component followed by "/" is the registry; no registry is ""
        ('image("nginx").registry()', ""),
        ('image("team/app").registry()', "team"),
        ('image("team/app").repository()', "app"),
        # normalized: Docker Hub unless the first component looks like a host
        ('image("nginx", true).registry()', "docker.io"),
        ('image("nginx", true).repository()', "library/nginx"),
        ('image("team/app", true).registry()', "docker.io"),
        ('image("team/app", true).repository()', "team/app"),
        ('image("index.docker.io/nginx", true).registry()', "docker.io"),
        ('image("localhost/app", true).registry()', "localhost"),
        ('image("Registry/app", true).registry()', "Registry"),  # upper case: a host, not a namespace
        (f'image("nginx@{DIGEST}", true).tag()', ""),  # a digest needs no default tag
        # a registry's port is not a tag; IPv6 registries are bracketed
        ('image("localhost:5000/team/app:v1").registry()', "localhost:5000"),
        ('image("localhost:5000/team/app:v1").tag()', "v1"),
        ('image("localhost:5000/team/app").tag()', ""),
        ('image("[::1]:5000/app:v1").registry()', "[::1]:5000"),
        # equality compares every part; the type is kubernetes.Image
        ('image("app") == image("app")', True),
        ('image("app") == image("app:latest")', False),
        ('image("app", true) == image("app:latest", true)', True),
        ('image("app", false) == image("app")', True),
        ('type(image("app")) == kubernetes.Image', True),
        ('image("app", true) == image("docker.io/library/app:latest")', True),
        # what distribution/reference accepts and rejects
        ('isImage("a")', True),
        ('isImage("a__b.c--d/e")', True),
        ('isImage("a___b")', False),  # at most two underscores in a row
        ('isImage("a/-b")', False),
        ('isImage("Team/App")', False),  # an upper-case repository
        ('isImage("Registry.io/app")', True),  # an upper-case registry
        ('isImage("app:")', False),
        ('isImage("user@host.io/app")', False),
        (f'isImage("app:{"v" * 128}")', True),  # a tag has at most 128 characters
        (f'isImage("app:{"v" * 129}")', False),
        (f'isImage("{"a" * 255}")', True),
        (f'isImage("{"a" * 256}")', False),
        (f'isImage("app@{DIGEST}@{DIGEST}")', False),
        (f'isImage("app@sha384:{"0" * 96}")', True),
        (f'isImage("app@sha512:{"0" * 128}")', True),
        ('isImage("")', False),
    ],
)
def test_image(text: str, expected: Any) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f'image("{K8S}:@")', "invalid reference format"),
        ('image("")', "repository name must have at least one component"),
        ('image("Team/App")', "repository name must be lowercase"),
        (f'image("{"a" * 256}")', "repository name must not be more than 255 characters"),
        # the digest is checked as go-digest does
        (f'image("app@{DIGEST[:-2]}")', "invalid checksum digest length"),
        (f'image("app@sha256:{"A" * 64}")', "invalid checksum digest format"),  # upper-case hex
        (f'image("app@md5:{"0" * 32}")', "unsupported digest algorithm"),
        (f'image("app@SHA256:{"0" * 64}")', "invalid checksum digest format"),
        # normalizing
        ('image("Team/App", true)', r"invalid reference format: repository name \(App\) must be lowercase"),
        (
            f'image("{"ab" * 32}", true)',
            r"invalid repository name \((ab){32}\), cannot specify 64-byte hexadecimal strings",
        ),
    ],
)
def test_image_of_a_bad_reference_is_an_error_naming_it_and_the_reason(text: str, reason: str) -> None:
    literal = text.split('"')[1]
    with pytest.raises(CelEvalError, match=f"^failed to parse image: .*, err: {reason}$") as caught:
        ev(text)
    assert str(caught.value).startswith(f"failed to parse image: {literal}, err: ")


def test_image_overloads() -> None:
    for text in ("isImage(0)", "image(1)", "image('app', 'yes')"):
        with pytest.raises(CelCompileError, match="found no matching overload for"):
            compile_expression(text, ENV)


def test_parse_image_parts() -> None:
    parsed = parse_image(f"{K8S}:latest@{DIGEST}")
    assert (parsed.registry, parsed.repository, parsed.identifier, parsed.tag, parsed.digest) == (
        "registry.k8s.io",
        "kube-apiserver-arm64",
        DIGEST,
        "latest",
        DIGEST,
    )
    assert str(parsed) == f"{K8S}:latest@{DIGEST}"
    normalized = parse_image("kube-apiserver-arm64", normalize=True)
    assert (normalized.image, normalized.registry, normalized.repository, normalized.tag) == (
        "docker.io/library/kube-apiserver-arm64:latest",
        "docker.io",
        "library/kube-apiserver-arm64",
        "latest",
    )
    with pytest.raises(ImageError):
        parse_image("registry.k8s.io/kube-apiserver-arm64:@")


SPEC = {
    "initContainers": [{"name": "init", "image": "busybox"}],
    "containers": [{"name": "main", "image": "nginx"}, {"name": "sidecar", "image": "envoy"}],
    "ephemeralContainers": [{"name": "debug", "image": "alpine"}],
}


@pytest.mark.parametrize(
    ("text", "spec", "expected"),
    [
        ("allContainers(spec).size()", SPEC, 4),
        ("allContainers(spec).map(c, c.name)", SPEC, ["init", "main", "sidecar", "debug"]),
        ("allContainers(spec).size()", {"containers": [{"name": "main"}]}, 1),
        ("allContainers(spec).size()", {}, 0),
        (
            "allContainers(spec).size()",
            {"initContainers": None, "containers": [{}], "ephemeralContainers": []},
            1,
        ),
        (
            "allContainers(spec).all(c, c.image.startsWith('myregistry.io/'))",
            {"containers": [{"image": "docker.io/nginx"}]},
            False,
        ),
        ("allContainers(spec.spec.template.spec).size()", {"spec": {"template": {"spec": SPEC}}}, 4),
        ("allContainers(spec).size()", [1, 2], 0),  # a list has no container fields
    ],
)
def test_all_containers(text: str, spec: Any, expected: Any) -> None:
    assert ev(text, {"spec": DYN}, spec=spec) == expected


def test_all_containers_field_that_is_no_list_is_an_error() -> None:
    with pytest.raises(
        CelEvalError, match=r"allContainers: containers is present but is not a list \(got string\)"
    ):
        ev("allContainers(spec)", {"spec": DYN}, spec={"containers": "not-a-list"})


def test_all_containers_of_a_scalar_is_no_overload() -> None:
    with pytest.raises(CelEvalError, match="no such overload"):
        ev("allContainers(spec)", {"spec": DYN}, spec="text")
