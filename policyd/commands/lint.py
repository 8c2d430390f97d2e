"""`policyd lint PATH... | --config policyd.yaml [--format text|json]`: check policy files.

With `--config`, lint checks exactly the set a reload of `policyd run --config` would load: every
profile's policy sources (files, directories, and the `.policy`/`.yaml`/`.yml` keys of ConfigMaps),
each profile composed from its own sources only, and every configured scheduler name must be
declared by a policy of its sources. ConfigMaps
are read from manifests given as `--configmap-file NAMESPACE/NAME=configmap.yaml` (a CI step can gate
a ConfigMap change before it is applied, without a cluster) or, for the others, through the API
with `--kubeconfig`.

Exit status: 0 clean (warnings allowed), 1 errors found, 2 usage or I/O error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from policyd import yaml_loading
from policyd.errors import IOProblem, PolicydError, PolicyError, unplaced
from policyd.policy.documents import SUITE_KIND, check_document, kinds_of
from policyd.policy.loader import LoadResult, load_policies, load_texts, read_policy_files
from policyd.service import config as configuration
from policyd.service.reload import ConfigMapSource


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    add_source_arguments(parser, "policyd.yaml: lint the policy set a reload would load")


def add_source_arguments(parser: argparse.ArgumentParser, config_help: str) -> None:
    """PATH... or --config (with its ConfigMap options): where the policies come from."""
    parser.add_argument("paths", nargs="*", metavar="PATH", help="policy files or directories")
    parser.add_argument("--config", metavar="FILE", help=config_help)
    parser.add_argument(
        "--configmap-file",
        action="append",
        default=[],
        metavar="NS/NAME=FILE",
        help="a ConfigMap manifest standing for the config's ConfigMap NS/NAME (repeatable)",
    )
    parser.add_argument("--kubeconfig", help="read the config's other ConfigMaps through this cluster's API")


def run(args: argparse.Namespace) -> int:
    """Lint the given paths (or the config's policy set); print diagnostics; return the exit code."""
    if args.config:
        if args.paths:
            print("policyd lint: give PATHs or --config, not both", file=sys.stderr)
            return 2
        try:
            result = load_config_set(args.config, args.configmap_file, args.kubeconfig)
        except PolicydError as err:
            print(f"policyd lint: {err}", file=sys.stderr)
            return 2
    elif args.configmap_file or args.kubeconfig:
        print("policyd lint: --configmap-file and --kubeconfig need --config", file=sys.stderr)
        return 2
    elif not args.paths:
        print("policyd lint: give PATHs or --config", file=sys.stderr)
        raise SystemExit(2)  # a usage error, as argparse reports one
    else:
        result = load_paths(args.paths)
        if not result.files and not result.io_errors:  # nothing to check is worth a word
            print(f"policyd lint: no policy or YAML files under {' '.join(args.paths)}", file=sys.stderr)
    return report(result, args.format)


def load_paths(paths: list[str]) -> LoadResult:
    """Policies under `paths`, and every other YAML document there checked against its kind's schema
    (and a test suite's nodes, pods and PDBs as a cluster file's: `policyd.commands.suite.object_diagnostics`)."""
    others: list[str] = []
    result = load_policies(paths, others)
    for path in others:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            found = check_document(path, text)
            if SUITE_KIND in kinds_of(text) and not any(d.severity == "error" for d in found):
                # the suites' Kubernetes objects; imported here, as it brings in the simulator
                from policyd.commands.suite import object_diagnostics

                found += object_diagnostics(path, text)
            result.diagnostics.extend(found)
        except (OSError, UnicodeDecodeError) as e:
            result.io_errors.append(IOProblem(path, str(e.strerror if isinstance(e, OSError) else e)))
            continue
        result.files.append(path)
    return result


def report(result: LoadResult, fmt: str) -> int:
    """Print the diagnostics and I/O errors; the exit code."""
    diagnostics = sorted(
        result.diagnostics, key=lambda d: (d.span.file, d.span.line, d.span.column, d.message)
    )
    for message in result.io_errors:
        print(f"policyd lint: {message}", file=sys.stderr)
    if fmt == "json":
        print(json.dumps([d.to_json() for d in diagnostics], indent=2))
    else:
        for d in diagnostics:
            print(d.format())
        errors = sum(1 for d in diagnostics if d.severity == "error")
        warnings = len(diagnostics) - errors
        if diagnostics:
            print(f"{errors} error(s), {warnings} warning(s) in {len(result.files)} file(s)", file=sys.stderr)
    if result.io_errors:
        return 2
    if result.has_errors:
        return 1
    return 0


def load_config_set(config_path: str, configmap_files: list[str], kubeconfig: str | None) -> LoadResult:
    """Parse and check the union of the config's policy sources, as `policyd run` reloads it."""
    cfg = configuration.load(config_path)
    paths = list(cfg.policy_paths())
    wanted = [s.config_map for s in cfg.config_map_sources()]
    manifests = _manifest_args(configmap_files, wanted)

    io_errors: list[IOProblem] = []
    texts = read_policy_files(paths, io_errors)

    maps = ConfigMapSource(wanted)
    for key in wanted:
        ns, _, name = key.partition("/")
        if key in manifests:
            maps.update(ns, name, _manifest_data(manifests[key], key))
        elif kubeconfig:
            maps.update(ns, name, _api_data(kubeconfig, ns, name))
        else:
            raise PolicydError(
                f"the config reads ConfigMap {key}: give --configmap-file {key}=FILE or --kubeconfig"
            )
    try:
        texts.update(maps.read())
    except PolicyError as err:  # a ConfigMap the config reads is missing
        io_errors.extend(IOProblem(d.span.file, d.message) for d in err.diagnostics)

    result = load_texts(texts, cfg.scopes(texts))
    result.io_errors[:0] = io_errors
    if not texts and not io_errors:
        result.io_errors.append(IOProblem(config_path, "no policy files in its policy sources"))
    problem = cfg.undeclared_profiles(result.profiles)
    if problem and not result.has_errors and not result.io_errors:  # not a consequence of another error
        result.diagnostics.append(unplaced(problem, "config", config_path))
    return result


def _manifest_args(items: list[str], wanted: list[str]) -> dict[str, str]:
    """`NS/NAME=FILE` arguments by `NS/NAME`; each must name one of the config's ConfigMaps."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, path = item.partition("=")
        if not sep or not path or key.count("/") != 1:
            raise PolicydError(f"--configmap-file: expected NAMESPACE/NAME=FILE, got {item!r}")
        if key not in wanted:
            raise PolicydError(f"--configmap-file: the config has no ConfigMap source {key}")
        out[key] = path
    return out


def _manifest_data(path: str, key: str) -> Mapping[str, str]:
    """The `data` of the ConfigMap manifest at `path` (its namespace/name, when present, must be `key`)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc: Any = yaml_loading.safe_load(f)
    except OSError as e:
        raise PolicydError(f"{path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise PolicydError(f"{path}: not YAML: {e}") from e
    if not isinstance(doc, dict) or doc.get("kind") != "ConfigMap":
        raise PolicydError(f"{path}: not a ConfigMap manifest")
    meta = doc.get("metadata") or {}
    ns, _, name = key.partition("/")
    if meta.get("name", name) != name or meta.get("namespace", ns) != ns:
        raise PolicydError(f"{path}: is ConfigMap {meta.get('namespace', ns)}/{meta.get('name')}, not {key}")
    data = doc.get("data") or {}
    if not isinstance(data, dict):
        raise PolicydError(f"{path}: data is not a mapping")
    return {str(k): str(v) for k, v in data.items()}


def _api_data(kubeconfig: str, namespace: str, name: str) -> Mapping[str, str] | None:
    """The ConfigMap's `data` read through the API (None: not found)."""
    from policyd.backends.kube.client import ApiError, KubeClient, object_path

    client = KubeClient.connect(kubeconfig)
    try:
        obj = client.request("GET", object_path("v1", "configmaps", namespace, name))
    except ApiError as err:
        if err.not_found:
            return None
        raise PolicydError(f"configmap {namespace}/{name}: {err}") from err
    finally:
        client.close()
    return dict(obj.get("data") or {})
