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
        (f'image("{K8S}:latest").containsDigest()', False),
        (f'image("{K8S}@{DIGEST}").containsDigest()', True),
        (f'image("{K8S}:latest@{DIGEST}").containsDigest()', True),
        (f'image("{K8S}").registry() == "registry.k8s.io"', True),
        ('image("kube-apiserver-arm64:testtag").registry()', "index.docker.io"),
        (f'image("{K8S}").registry().matches("(registry.k8s.io|ghcr.io)")', True),
        (f'image("{K8S}").repository() == "kube-apiserver-arm64"', True),
        (f'image("{K8S}:testtag").identifier()', "testtag"),
        (f'image("{K8S}@{DIGEST}").identifier()', DIGEST),
        (f'image("{K8S}:latest@{DIGEST}").identifier() == "{DIGEST}"', True),
        (f'image("{K8S}").identifier()', "latest"),
        (f'image("{K8S}:testtag").tag()', "testtag"),
        (f'image("{K8S}").tag()', "latest"),
        (f'image("{K8S}@{DIGEST}").tag()', ""),
        (f'image("{K8S}").digest()', ""),
        (f'image("{K8S}:testtag").digest()', ""),
        (f'image("{K8S}@{DIGEST}").digest()', DIGEST),
        (f'image("{K8S}:latest@{DIGEST}").digest() == "{DIGEST}"', True),
        # Docker Hub: the default registry, its alias, the implicit library/ namespace
        ('image("nginx").repository()', "library/nginx"),
        ('image("nginx:1.27").registry()', "index.docker.io"),
        ('image("docker.io/nginx").registry()', "index.docker.io"),
        ('image("docker.io/team/app").repository()', "team/app"),
        (f'image("nginx@{DIGEST}").repository()', "library/nginx"),
        # a registry with a port is not a tag; an empty tag is the default one
        ('image("localhost:5000/team/app").tag()', "latest"),
        ('image("localhost:5000/team/app:v1").registry()', "localhost:5000"),
        ('image("localhost:5000/team/app:v1").tag()', "v1"),
        ('image("[::1]:5000/app:v1").registry()', "[::1]:5000"),
        ('image("app:").tag()', "latest"),
        # equality compares every part; the type is kubernetes.Image
        ('image("app") == image("app")', True),
        ('image("app") == image("app:latest")', False),
        ('type(image("app")) == kubernetes.Image', True),
        # what go-containerregistry rejects
        ('isImage("a")', False),  # a repository has at least 2 characters
        ('isImage("Team/App")', False),  # upper case
        ('isImage("host.io:5x/app")', False),  # a registry that is no URI authority
        ('isImage("user@host.io/app")', False),
        (f'isImage("app@{DIGEST[:-1]}")', False),  # a digest of 63 hex digits
        (f'isImage("app@{DIGEST}@{DIGEST}")', False),
        (f'isImage("app:{"v" * 128}")', False),  # a tag has at most 127 characters
        (f'isImage("app:{"v" * 127}")', True),
        ('isImage("")', False),
    ],
)
def test_image(text: str, expected: Any) -> None:
    assert ev(text) == expected


def test_image_of_a_bad_reference_is_an_error_naming_it() -> None:
    with pytest.raises(CelEvalError, match=f"could not parse reference: {K8S}:@"):
        ev(f'image("{K8S}:@")')


def test_is_image_of_a_number_is_no_overload() -> None:
    with pytest.raises(CelCompileError, match="found no matching overload for 'isImage' applied to"):
        compile_expression("isImage(0)", ENV)


def test_parse_image_parts() -> None:
    parsed = parse_image(f"{K8S}:latest@{DIGEST}")
    assert (parsed.registry, parsed.repository, parsed.identifier, parsed.tag, parsed.digest) == (
        "registry.k8s.io",
        "kube-apiserver-arm64",
        DIGEST,
        "",
        DIGEST,
    )
    assert str(parsed) == f"{K8S}:latest@{DIGEST}"
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
