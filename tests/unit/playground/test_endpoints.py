"""The playground's HTTP endpoints on a real server: static files, examples, lint, run and their limits."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from policyd import shipped
from policyd.commands import playground as command
from policyd.commands.simulate import simulate
from policyd.playground.server import MAX_BODY, Limits, PlaygroundServer, host_allowed
from policyd.playground.session import MAX_NODES

DEFAULT_TEXT = shipped.default_policy().read_text(encoding="utf-8")
CLUSTER_TEXT = shipped.example_cluster().read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def served() -> Iterator[PlaygroundServer]:
    """One playground on a free loopback port for the module's tests."""
    server = command.server("127.0.0.1", 0)
    server.start()
    yield server
    server.stop()


def request(
    server: PlaygroundServer,
    method: str,
    path: str,
    body: bytes | None = None,
    content_type: str = "application/json",
) -> tuple[int, Any, str]:
    """(status, JSON document or text, content type) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        headers = {"Content-Type": content_type} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        kind = response.getheader("Content-Type") or ""
        return response.status, json.loads(raw) if kind == "application/json" else raw.decode(), kind
    finally:
        conn.close()


def post(server: PlaygroundServer, path: str, doc: Any) -> tuple[int, Any]:
    """(status, JSON document) of a JSON POST."""
    status, body, _ = request(server, "POST", path, json.dumps(doc).encode())
    return status, body


def run_doc(policy: str = DEFAULT_TEXT, cluster: str = CLUSTER_TEXT, **extra: Any) -> dict[str, Any]:
    """A run request for the shipped default.policy text (or `policy`) on the example cluster (or `cluster`)."""
    return {
        "policy": {"name": "default.policy", "text": policy},
        "cluster": {"name": "cluster.yaml", "text": cluster},
        **extra,
    }


def test_the_page_and_its_assets_are_served(served: PlaygroundServer) -> None:
    status, page, kind = request(served, "GET", "/")
    assert status == 200 and kind.startswith("text/html") and "/static/playground.js" in page
    status, script, kind = request(served, "GET", "/static/playground.js")
    assert status == 200 and kind.startswith("text/javascript") and "CompressionStream" in script
    status, doc, _ = request(served, "GET", "/static/../session.py")
    assert status == 404 and "no page" in doc["error"]


def test_examples_list_the_shipped_policies_and_cluster(served: PlaygroundServer) -> None:
    status, doc, _ = request(served, "GET", "/api/examples")
    assert status == 200
    names = [p["name"] for p in doc["policies"]]
    assert names[0] == "default.policy" and "binpack.policy" in names and "protect-namespace.yaml" in names
    assert doc["policies"][0]["text"] == DEFAULT_TEXT and not doc["policies"][0]["withDefault"]
    assert all(p["withDefault"] for p in doc["policies"][1:])
    assert doc["clusters"] == [{"name": "cluster.yaml", "text": CLUSTER_TEXT}]


def test_lint_reports_the_error_at_its_line_and_column(served: PlaygroundServer) -> None:
    text = 'policy p {\n  profiles = ["p"]\n  filter F { expr = nodee.name == "a" }\n}\n'
    status, doc = post(served, "/api/lint", {"policy": {"name": "mine.policy", "text": text}})
    assert status == 200
    [diagnostic] = [d for d in doc["diagnostics"] if d["severity"] == "error"]
    assert (diagnostic["file"], diagnostic["line"], diagnostic["column"]) == ("mine.policy", 3, 21)
    assert diagnostic["severity"] == "error" and "nodee" in diagnostic["message"]
    fixed = text.replace("nodee", "node")
    status, doc = post(served, "/api/lint", {"policy": {"name": "mine.policy", "text": fixed}})
    assert status == 200 and doc["profiles"] == ["p"]
    assert [d["code"] for d in doc["diagnostics"]] == [
        "no-resource-fit"
    ]  # a warning, as `policyd lint` gives


def test_lint_composes_an_example_with_the_shipped_default(served: PlaygroundServer) -> None:
    binpack = (shipped.policies_dir() / "examples" / "binpack.policy").read_text(encoding="utf-8")
    status, doc = post(
        served, "/api/lint", {"policy": {"name": "binpack.policy", "text": binpack}, "withDefault": True}
    )
    assert status == 200 and doc["diagnostics"] == [] and doc["profiles"] == ["binpack", "policyd"]
    # unticked, `extends default` still names the shipped policy, as a base of binpack's profile only
    status, doc = post(served, "/api/lint", {"policy": {"name": "binpack.policy", "text": binpack}})
    assert status == 200 and doc["diagnostics"] == [] and doc["profiles"] == ["binpack"]


def test_yaml_policies_are_linted_in_their_form(served: PlaygroundServer) -> None:
    text = (
        "apiVersion: policyd.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: y}\nspec:\n  profiles: 3\n"
    )
    status, doc = post(served, "/api/lint", {"policy": {"name": "y.yaml", "text": text}})
    assert status == 200 and doc["diagnostics"] and doc["diagnostics"][0]["file"] == "y.yaml"
    assert doc["diagnostics"][0]["line"] == 5


def test_run_gives_the_placements_of_simulate_and_the_heatmap(served: PlaygroundServer) -> None:
    status, doc = post(served, "/api/run", run_doc())
    assert status == 200
    expected = simulate(None, None, 0, explain=True).report()
    assert doc["placements"] == expected["placements"]
    assert doc["summary"] == expected["summary"] and doc["victims"] == expected["victims"]
    explained = doc["explained"]
    pending = next(p for p in doc["placements"] if p["node"] is None)
    assert explained["pod"] == pending["pod"] and explained["message"] == pending["message"]
    assert explained["message"].startswith("0/6 nodes are available")
    assert len(explained["nodes"]) == 6
    fit = next(r for r in explained["rows"] if r["rule"] == "default/NodeResourcesFit")
    assert fit["kind"] == "filter" and len(fit["cells"]) == 6
    assert any(c["verdict"] == "fail" and c["reasons"] for c in fit["cells"])


def test_run_explains_the_requested_pod_with_weighted_scores(served: PlaygroundServer) -> None:
    status, doc = post(served, "/api/run", run_doc(pod="ml/model-train", seed=3))
    assert status == 200
    explained = doc["explained"]
    assert explained["pod"] == "ml/model-train" and explained["node"] == "gpu-c1"
    chosen = [n for n in explained["nodes"] if n["name"] == "gpu-c1"][0]
    index = explained["nodes"].index(chosen)
    scores = [r["cells"][index] for r in explained["rows"] if r["kind"] == "score"]
    assert scores and all(c["verdict"] == "score" for c in scores)
    assert chosen["total"] == sum(c["weighted"] for c in scores)


def test_a_score_whose_evaluation_failed_carries_its_error(served: PlaygroundServer) -> None:
    policy = DEFAULT_TEXT.replace(
        "policy default {", 'policy default {\n  score Missing { expr = node.free["example.com/none"] }', 1
    )
    status, doc = post(served, "/api/run", run_doc(policy=policy, pod="ml/model-train", seed=3))
    assert status == 200
    (row,) = [r for r in doc["explained"]["rows"] if r["rule"] == "default/Missing"]
    scored = [c for c in row["cells"] if c["verdict"] == "score"]
    assert scored and all(c["error"] == "no such key: example.com/none" for c in scored)
    cells = [c for r in doc["explained"]["rows"] if r["rule"] != "default/Missing" for c in r["cells"]]
    assert not any("error" in c for c in cells)


def test_run_of_a_broken_policy_returns_its_diagnostics(served: PlaygroundServer) -> None:
    broken = DEFAULT_TEXT.replace("policy default {", "policy default {\n  let x = nodee.name", 1)
    status, doc = post(served, "/api/run", run_doc(policy=broken))
    assert status == 422 and doc["error"] == "the policy has errors"
    assert any(d["line"] == 13 and d["file"] == "default.policy" for d in doc["diagnostics"])


def test_run_of_a_broken_cluster_names_its_line(served: PlaygroundServer) -> None:
    status, doc = post(served, "/api/run", run_doc(cluster="apiVersion: v1\nkind: List\nitems: [\n  {a: b\n"))
    assert status == 422 and "cannot be loaded" in doc["error"]
    [problem] = doc["diagnostics"]
    assert problem["file"] == "cluster.yaml" and problem["line"] >= 4 and "invalid YAML" in problem["message"]


def test_a_cluster_problem_with_no_place_has_no_line(served: PlaygroundServer) -> None:
    deep = '{"a": ' * 70 + "1" + "}" * 70  # JSON nested past what a cluster file may nest
    status, doc = post(served, "/api/run", run_doc(cluster=deep))
    assert status == 422 and "cannot be loaded" in doc["error"]
    assert doc["diagnostics"] == [
        {
            "file": "cluster.yaml",
            "line": None,
            "column": None,
            "severity": "error",
            "message": "invalid JSON: nested more than 64 levels deep",
        }
    ]


def test_run_refuses_an_unknown_pod_and_bad_fields(served: PlaygroundServer) -> None:
    status, doc = post(served, "/api/run", run_doc(pod="shop/nope"))
    assert status == 422 and "shop/nope" in doc["error"]
    status, doc = post(served, "/api/run", run_doc(seed="1"))
    assert status == 422 and "'seed'" in doc["error"]
    status, doc = post(served, "/api/lint", {"policy": {"name": "../etc/passwd", "text": ""}})
    assert status == 422 and "file name" in doc["error"]


def test_a_cluster_over_the_size_limits_is_refused(served: PlaygroundServer) -> None:
    nodes = [
        {"kind": "Node", "metadata": {"name": f"n{i}"}, "status": {"allocatable": {"cpu": "1"}}}
        for i in range(MAX_NODES + 1)
    ]
    cluster = json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes})
    status, doc = post(served, "/api/run", run_doc(cluster=cluster))
    assert status == 422 and f"at most {MAX_NODES} nodes" in doc["error"]


def test_bodies_over_the_limit_non_json_and_unknown_paths_are_refused(served: PlaygroundServer) -> None:
    status, doc, _ = request(served, "POST", "/api/lint", b"x" * (MAX_BODY + 1))
    assert status == 413 and str(MAX_BODY) in doc["error"]
    status, doc, _ = request(served, "POST", "/api/lint", b"policy=1", "application/x-www-form-urlencoded")
    assert status == 415
    status, doc, _ = request(served, "POST", "/api/lint", b"{not json")
    assert status == 400 and "not JSON" in doc["error"]
    # a body nested past the decoder's recursion: refused, not a dropped connection
    status, doc, _ = request(served, "POST", "/api/lint", b"[" * 100_000 + b"]" * 100_000)
    assert (status, doc["error"]) == (400, "the request body is not JSON: nested too deeply")
    status, doc = post(served, "/api/compile", {})
    assert status == 404


def test_a_run_over_its_time_limit_is_stopped_with_504() -> None:
    server = command.server("127.0.0.1", 0, Limits(run_seconds=0.01))
    server.start()
    try:
        status, doc = post(server, "/api/run", run_doc())
    finally:
        server.stop()
    assert status == 504 and "took longer than 0.01 s and was stopped" in doc["error"]


def test_every_worker_busy_is_503() -> None:
    server = command.server("127.0.0.1", 0, Limits(workers=0))
    server.start()
    try:
        status, doc = post(server, "/api/lint", {"policy": {"name": "a.policy", "text": ""}})
    finally:
        server.stop()
    assert status == 503 and "busy" in doc["error"]


def test_a_request_naming_another_host_is_refused(served: PlaygroundServer) -> None:
    """DNS rebinding: a page at attacker.example resolved to 127.0.0.1 sends `Host: attacker.example`."""
    for method, path, body in (("GET", "/", None), ("POST", "/api/lint", b"{}")):
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
        try:
            headers = {"Host": f"attacker.example:{served.port}", "Content-Type": "application/json"}
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            doc = json.loads(response.read())
        finally:
            conn.close()
        assert response.status == 403, (method, path)
        assert "attacker.example" in doc["error"]
    assert request(served, "GET", "/")[0] == 200  # Host: 127.0.0.1:port


@pytest.mark.parametrize(
    ("host", "bound", "allowed"),
    [
        ("localhost:8765", "127.0.0.1", True),
        ("127.0.0.1:8765", "127.0.0.1", True),
        ("[::1]:8765", "::1", True),
        ("evil.example:8765", "127.0.0.1", False),
        (None, "127.0.0.1", False),
        ("evil.example", "0.0.0.0", True),
    ],
)
def test_host_allowed(host: str | None, bound: str, allowed: bool) -> None:
    """Loopback-bound servers answer loopback names only; one exposed on purpose answers any."""
    assert host_allowed(host, bound) is allowed
