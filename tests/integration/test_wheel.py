"""The wheel, installed on its own, works from any directory: every command a new user tries exits 0.

The wheel is built from a copy of what the Dockerfile copies (pyproject.toml, README.md, policyd/),
installed with `--target` into a temporary directory that goes first on PYTHONPATH, and run with the
working directory elsewhere, so neither the source tree nor the dev venv's editable install is used
(checked through `policyd.__file__`). Its dependencies come from the running interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

YAML_POLICY = """\
apiVersion: policyd.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: spread-cpu}
spec:
  profiles: [policyd]
  lets:
    - {name: cpu, expr: 'pod.requests["cpu"]'}
  filters:
    - {name: FitsCpu, expr: 'node.free["cpu"] >= cpu', reason: Insufficient cpu}
  scores:
    - {name: MostFree, expr: 'node.free["cpu"]', weight: 1, normalize: max}
"""


class Installed:
    """The installed wheel: run `python -m policyd ...` with it first on the path, from `cwd`."""

    def __init__(self, target: Path, cwd: Path) -> None:
        self.target = target
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        self.env["PYTHONPATH"] = str(target)

    def python(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run this interpreter with `args`; the result (output captured)."""
        return subprocess.run(
            [sys.executable, *args], cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=120
        )

    def policyd(self, *args: str) -> str:
        """`python -m policyd ARGS`: asserts exit 0 and no traceback; returns stdout."""
        done = self.python("-m", "policyd", *args)
        shown = f"policyd {' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert done.returncode == 0, shown
        assert "Traceback" not in done.stderr + done.stdout, shown
        return done.stdout

    def value(self, expression: str) -> str:
        """The printed value of a Python expression evaluated in the installed package's context."""
        done = self.python("-c", f"import policyd, policyd.shipped as shipped; print({expression})")
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel built from a copy of the sources and installed with --target; a fresh working directory."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "policyd", source / "policyd", ignore=shutil.ignore_patterns("__pycache__"))
    dist = root / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = dist.glob("policyd-*.whl")
    target = root / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    cwd = root / "elsewhere"
    cwd.mkdir()
    return Installed(target, cwd)


def test_the_installed_copy_is_imported(installed: Installed) -> None:
    assert Path(installed.value("policyd.__file__")).is_relative_to(installed.target)
    assert Path(installed.value("shipped.policies_dir()")).is_relative_to(installed.target)


def test_version(installed: Installed) -> None:
    assert installed.value("policyd.__version__") in installed.policyd("--version")


def test_lint_a_yaml_policy(installed: Installed) -> None:
    policy = installed.cwd / "spread-cpu.yaml"
    policy.write_text(YAML_POLICY)
    installed.policyd("lint", str(policy))
    # the installed schema and checker reject a broken copy, naming the file and the line
    broken = installed.cwd / "broken.yaml"
    broken.write_text(YAML_POLICY.replace("weight: 1", "weight: heavy"))
    done = installed.python("-m", "policyd", "lint", str(broken))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert f"{broken}:11:58: error: spec.scores[0].weight" in done.stdout + done.stderr, (
        done.stdout + done.stderr
    )


def test_a_layer_over_the_defaults_lints_and_simulates_alone(installed: Installed) -> None:
    """`extends default` finds the default.policy inside the installed package, from any directory."""
    example = Path(installed.value("shipped.policies_dir()")) / "examples" / "binpack.policy"
    layer = installed.cwd / "binpack.policy"
    layer.write_text(example.read_text(encoding="utf-8"))
    assert installed.policyd("lint", str(layer)) == ""
    effective = installed.policyd("effective", str(layer))
    assert effective.startswith("profile binpack (layers: default, binpack)")
    assert installed.value("shipped.default_policy()") in effective
    installed.policyd("simulate", "--policies", str(layer))


def test_every_shipped_suite(installed: Installed) -> None:
    suites = sorted(Path(installed.value("shipped.policies_dir()")).joinpath("tests").glob("*.yaml"))
    assert len(suites) >= 4
    for suite in suites:
        installed.policyd("test", str(suite))


@pytest.mark.parametrize("args", [(), ("--cluster", "EXAMPLE")])
def test_simulate_with_the_shipped_defaults(installed: Installed, args: Sequence[str]) -> None:
    example = installed.value("shipped.example_cluster()")
    assert Path(example).is_relative_to(installed.target)
    out = installed.policyd("simulate", *[example if a == "EXAMPLE" else a for a in args])
    assert "shop/" in out


def test_explain(installed: Installed) -> None:
    out = installed.policyd("explain", "--pod", "shop/analytics-olap")
    assert "result: shop/analytics-olap" in out


def test_eval(installed: Installed) -> None:
    assert installed.policyd("eval", "1 + 2").strip() == "3"


def test_tiny_bench(installed: Installed) -> None:
    out = installed.cwd / "bench-out"
    installed.policyd(
        "bench",
        "-w",
        "SchedulingBasic/500",
        "--scale",
        "0.001",
        "--node-scale",
        "0.002",
        "-q",
        "--out",
        str(out),
    )
    assert len(list(out.glob("bench-*.json"))) == 1


def test_the_playground_assets_ship_and_are_served(installed: Installed) -> None:
    static = Path(
        installed.value("__import__('importlib.resources').resources.files('policyd.playground') / 'static'")
    )
    assert static.is_relative_to(installed.target)
    assert {"index.html", "playground.css", "playground.js"} <= {p.name for p in static.iterdir()}
    # the installed command serves the page and runs the example cluster from its own assets
    process = subprocess.Popen(
        [sys.executable, "-m", "policyd", "playground", "--port", "0"],
        cwd=installed.cwd,
        env=installed.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "serving http://127.0.0.1:" in line, line + (process.stderr.read() if process.stderr else "")
        url = line.split("serving ", 1)[1].split()[0]
        with urllib.request.urlopen(url, timeout=60) as page:
            assert b"/static/playground.js" in page.read()
        with urllib.request.urlopen(url + "static/playground.js", timeout=60) as script:
            assert b"CompressionStream" in script.read()
        with urllib.request.urlopen(url + "api/examples", timeout=60) as answer:
            examples = json.load(answer)
        body = {
            "policy": {"name": "default.policy", "text": examples["policies"][0]["text"]},
            "cluster": examples["clusters"][0],
        }
        ask = urllib.request.Request(
            url + "api/run", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(ask, timeout=120) as answer:
            report = json.load(answer)
        assert report["summary"]["scheduled"] > 0 and report["explained"]["rows"]
    finally:
        process.terminate()
        process.wait(timeout=30)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
