"""The `policyd.yaml` configuration: JSON Schema validation, defaults, typed settings.

Errors name the failing JSON path (`$.profiles[0].schedulerName: ...`), and, for a file, the line and
column of the value at that path (or of the nearest enclosing one that is written). `defaults()` is the
whole effective configuration without a file; a file's values override it key by key.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from policyd import shipped, yaml_loading
from policyd.errors import ConfigError
from policyd.framework import DEFAULT_PROFILE
from policyd.service import authentication, authorization
from policyd.service.http import DEFAULT_ADDRESS, DEFAULT_PORT

API_VERSION = "policyd.io/v1alpha1"
KIND = "PolicydConfiguration"


def defaults() -> dict[str, Any]:
    """The default configuration as a JSON-shaped dict (what `--write-config-to` writes)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "profiles": [
            {
                "schedulerName": DEFAULT_PROFILE,
                "policySources": [{"path": str(shipped.default_policy())}],
            }
        ],
        "percentageOfNodesToScore": 0,
        "backoff": {"initialSeconds": 1, "maxSeconds": 10},
        "bindParallelism": 64,
        "allowProfileRemoval": False,
        "clientConnection": {"kubeconfig": "", "master": "", "qps": 50, "burst": 100},
        "leaderElection": {
            "leaderElect": True,
            "leaseDurationSeconds": 15,
            "renewDeadlineSeconds": 10,
            "retryPeriodSeconds": 2,
            "resourceNamespace": "kube-system",
            "resourceName": "policyd",
        },
        "serving": {
            "bindAddress": DEFAULT_ADDRESS,
            "port": DEFAULT_PORT,
            "insecure": False,
            "tls": {"certFile": "", "privateKeyFile": "", "clientCAFile": ""},
            "authentication": {"kubeconfig": "", "cacheTTLSeconds": authentication.DEFAULT_CACHE_TTL},
            "authorization": {
                "kubeconfig": "",
                "alwaysAllowPaths": list(authorization.DEFAULT_ALWAYS_ALLOW_PATHS),
                "allowCacheTTLSeconds": authorization.DEFAULT_ALLOW_TTL,
                "denyCacheTTLSeconds": authorization.DEFAULT_DENY_TTL,
            },
        },
    }


def write_defaults(path: str | Path) -> None:
    """Write the default configuration as YAML to `path`."""
    text = "# policyd configuration (policyd/schemas/config.schema.json)\n" + yaml.safe_dump(
        defaults(), sort_keys=False
    )
    Path(path).write_text(text, encoding="utf-8")


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(shipped.schema("config"))


def _json_path(parts: Any) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong in a configuration document: where (its JSON path), what, and the unknown keys
    it is about (an error is pointed at the first of them rather than at their mapping)."""

    path: tuple[str | int, ...]
    message: str
    keys: tuple[str, ...] = ()


class InvalidConfig(ConfigError):
    """A configuration document breaks its schema or a rule; `problems` by JSON path, so that `load`
    points each at its line and column. The message is one `SOURCE: $.path: problem` line each."""

    def __init__(self, source: str, problems: Sequence[ConfigProblem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(f"{source}: {_json_path(p.path)}: {p.message}" for p in self.problems))


def _schema_problem(err: jsonschema.ValidationError) -> ConfigProblem:
    keys: tuple[str, ...] = ()
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        known = err.schema.get("properties", {}) if isinstance(err.schema, dict) else {}
        keys = tuple(str(k) for k in err.instance if k not in known)
    return ConfigProblem(tuple(err.absolute_path), err.message, keys)


def validate(doc: Any, source: str = "<config>") -> None:
    """Raise InvalidConfig naming the JSON path of the first schema violation (deepest first)."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: (list(e.absolute_path), e.message))
    if not errors:
        return
    best = jsonschema.exceptions.best_match(errors)
    raise InvalidConfig(source, [_schema_problem(e) for e in [best, *(e for e in errors if e is not best)]])


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class PolicySourceRef:
    """A configured place policies come from: a file/directory path, or a ConfigMap `namespace/name`.

    `policyd.service.reload.PolicySource` is what reads them at run time.
    """

    path: str = ""
    config_map: str = ""

    def __str__(self) -> str:
        return f"configmap:{self.config_map}" if self.config_map else self.path

    @property
    def config_map_ref(self) -> tuple[str, str]:
        """(namespace, name) of a ConfigMap source."""
        ns, _, name = self.config_map.partition("/")
        return ns, name

    def holds(self, text_name: str) -> bool:
        """True when a policy text named `text_name` (a file path, `configmap://ns/name/key`) comes from here."""
        if self.config_map:
            return text_name.startswith(f"configmap://{self.config_map}/")
        if "://" in text_name:
            return False
        root, name = os.path.abspath(self.path), os.path.abspath(text_name)
        return name == root or name.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class Profile:
    """One scheduler name and the policy sources that define it (its own: never another profile's)."""

    scheduler_name: str
    sources: tuple[PolicySourceRef, ...]

    def holds(self, text_name: str) -> bool:
        """True when a policy text comes from one of the profile's sources."""
        return any(src.holds(text_name) for src in self.sources)


@dataclass(frozen=True)
class LeaderElection:
    """Leader-election settings (seconds)."""

    leader_elect: bool
    lease_duration: float
    renew_deadline: float
    retry_period: float
    namespace: str
    name: str


@dataclass(frozen=True)
class SecureServing:
    """HTTPS and delegated authentication/authorization of the serving port (kube-scheduler's secure port).

    Empty file names: a self-signed certificate, no client certificates, the client connection's
    credentials for TokenReviews and SubjectAccessReviews.
    """

    cert_file: str
    key_file: str
    client_ca_file: str
    authentication_kubeconfig: str
    authorization_kubeconfig: str
    always_allow_paths: tuple[str, ...]
    token_cache_ttl: float
    allow_cache_ttl: float
    deny_cache_ttl: float


@dataclass(frozen=True)
class Config:
    """The effective configuration, typed; `raw` is the merged JSON document (for /configz)."""

    profiles: tuple[Profile, ...]
    percentage_of_nodes_to_score: int
    backoff_initial: float
    backoff_max: float
    bind_parallelism: int
    # a reload that leaves a profile with no policy is refused unless this is set
    allow_profile_removal: bool
    kubeconfig: str
    master: str
    qps: float
    burst: int
    leader_election: LeaderElection
    bind_address: str
    port: int
    # None: plain HTTP without authentication or authorization (`serving.insecure`, `policyd run --port`)
    secure: SecureServing | None
    raw: dict[str, Any]

    @property
    def scheduler_names(self) -> tuple[str, ...]:
        """Scheduler names of every profile."""
        return tuple(p.scheduler_name for p in self.profiles)

    def policy_paths(self) -> tuple[str, ...]:
        """Every distinct file/directory policy source, in configuration order."""
        paths: dict[str, None] = {}
        for profile in self.profiles:
            for src in profile.sources:
                if src.path:
                    paths.setdefault(src.path)
        return tuple(paths)

    def scopes(self, text_names: Iterable[str]) -> dict[str, frozenset[str]]:
        """Scheduler name -> the loaded policy texts its own sources hold (`policyd.policy.composition`)."""
        names = list(text_names)
        return {p.scheduler_name: frozenset(n for n in names if p.holds(n)) for p in self.profiles}

    def undeclared_profiles(self, declared: Iterable[str]) -> str:
        """The error when a configured scheduler name is in none of `declared` ("" when all are)."""
        known = set(declared)
        missing = [n for n in self.scheduler_names if n not in known]
        if not missing:
            return ""
        return f"no policy declares profile(s) {', '.join(missing)} (policies' `profiles = [...]`)"

    def config_map_sources(self) -> tuple[PolicySourceRef, ...]:
        """Every distinct ConfigMap policy source."""
        seen: dict[str, PolicySourceRef] = {}
        for profile in self.profiles:
            for src in profile.sources:
                if src.config_map:
                    seen.setdefault(src.config_map, src)
        return tuple(seen.values())


def _source(doc: dict[str, Any]) -> PolicySourceRef:
    return PolicySourceRef(path=str(doc.get("path", "")), config_map=str(doc.get("configMap", "")))


def from_dict(doc: Any, source: str = "<config>") -> Config:
    """Validate a configuration document and merge it over the defaults."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise InvalidConfig(source, [ConfigProblem((), f"expected a mapping, got {type(doc).__name__}")])
    validate(doc, source)
    merged = _merge(defaults(), doc)
    if "profiles" not in doc and "policySources" in doc:
        merged["profiles"] = [{"schedulerName": DEFAULT_PROFILE}]
    shared = [_source(s) for s in doc.get("policySources", [])]
    profiles = []
    names: set[str] = set()
    for i, p in enumerate(merged["profiles"]):
        name = p["schedulerName"]
        if name in names:
            problem = ConfigProblem(("profiles", i, "schedulerName"), f"duplicate scheduler name {name!r}")
            raise InvalidConfig(source, [problem])
        names.add(name)
        own = [_source(s) for s in p.get("policySources", [])]
        sources = own or shared or [PolicySourceRef(path=str(shipped.default_policy()))]
        profiles.append(Profile(name, tuple(sources)))
    backoff = merged["backoff"]
    if backoff["initialSeconds"] > backoff["maxSeconds"]:
        problem = ConfigProblem(("backoff", "initialSeconds"), "must not exceed backoff.maxSeconds")
        raise InvalidConfig(source, [problem])
    le = merged["leaderElection"]
    if not le["leaseDurationSeconds"] > le["renewDeadlineSeconds"] > le["retryPeriodSeconds"]:
        need = "need leaseDurationSeconds > renewDeadlineSeconds > retryPeriodSeconds"
        raise InvalidConfig(source, [ConfigProblem(("leaderElection",), need)])
    client = merged["clientConnection"]
    serving = merged["serving"]
    secure = _secure_serving(serving, source)
    return Config(
        profiles=tuple(profiles),
        percentage_of_nodes_to_score=int(merged["percentageOfNodesToScore"]),
        backoff_initial=float(backoff["initialSeconds"]),
        backoff_max=float(backoff["maxSeconds"]),
        bind_parallelism=int(merged["bindParallelism"]),
        allow_profile_removal=bool(merged["allowProfileRemoval"]),
        kubeconfig=str(client.get("kubeconfig", "")),
        master=str(client.get("master", "")),
        qps=float(client["qps"]),
        burst=int(client["burst"]),
        leader_election=LeaderElection(
            leader_elect=bool(le["leaderElect"]),
            lease_duration=float(le["leaseDurationSeconds"]),
            renew_deadline=float(le["renewDeadlineSeconds"]),
            retry_period=float(le["retryPeriodSeconds"]),
            namespace=str(le["resourceNamespace"]),
            name=str(le["resourceName"]),
        ),
        bind_address=str(serving["bindAddress"]),
        port=int(serving["port"]),
        secure=secure,
        raw=merged,
    )


def _secure_serving(serving: dict[str, Any], source: str) -> SecureServing | None:
    tls, authn, authz = serving["tls"], serving["authentication"], serving["authorization"]
    if bool(tls["certFile"]) != bool(tls["privateKeyFile"]):
        together = "certFile and privateKeyFile go together (or neither: self-signed)"
        raise InvalidConfig(source, [ConfigProblem(("serving", "tls"), together)])
    for i, path in enumerate(authz["alwaysAllowPaths"]):
        problem = authorization.always_allow_path_problem(path)
        if problem:
            at = ("serving", "authorization", "alwaysAllowPaths", i)
            raise InvalidConfig(source, [ConfigProblem(at, problem)])
    if serving["insecure"]:
        named = [
            f"serving.{section}.{key}"
            for section, key in (
                ("tls", "certFile"),
                ("tls", "privateKeyFile"),
                ("tls", "clientCAFile"),
                ("authentication", "kubeconfig"),
                ("authorization", "kubeconfig"),
            )
            if serving[section][key]
        ]
        if named:
            plain = f"plain HTTP has no TLS or authentication; remove {', '.join(named)} or serve securely"
            raise InvalidConfig(source, [ConfigProblem(("serving", "insecure"), plain)])
        return None
    return SecureServing(
        cert_file=str(tls["certFile"]),
        key_file=str(tls["privateKeyFile"]),
        client_ca_file=str(tls["clientCAFile"]),
        authentication_kubeconfig=str(authn["kubeconfig"]),
        authorization_kubeconfig=str(authz["kubeconfig"]),
        always_allow_paths=tuple(str(p) for p in authz["alwaysAllowPaths"]),
        token_cache_ttl=float(authn["cacheTTLSeconds"]),
        allow_cache_ttl=float(authz["allowCacheTTLSeconds"]),
        deny_cache_ttl=float(authz["denyCacheTTLSeconds"]),
    )


def load(path: str | Path | None) -> Config:
    """Read and validate a `policyd.yaml` (None: the defaults)."""
    if path is None:
        return from_dict({}, "<defaults>")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{p}: cannot read: {err.strerror or err}") from err
    try:
        doc = yaml_loading.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{p}{where}: invalid YAML: {getattr(err, 'problem', err)}") from err
    try:
        return from_dict(doc, str(p))
    except InvalidConfig as err:
        raise ConfigError(_with_positions(err, text)) from None


def _with_positions(err: InvalidConfig, text: str) -> str:
    """`err`'s message with each `SOURCE: $.path: ...` line as `SOURCE:LINE:COL: $.path: ...`, at the
    value its path names (the deepest one written), or at the first unknown key it is about."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:  # pragma: no cover - `load` parsed the same text
        return str(err)
    if root is None:
        return str(err)
    lines = []
    for problem in err.problems:
        node = _node_at(root, problem.path)
        if problem.keys and isinstance(node, yaml.MappingNode):
            node = next((k for k, _ in node.value if k.value in problem.keys), node)
        mark = node.start_mark
        lines.append(
            f"{err.source}:{mark.line + 1}:{mark.column + 1}: {_json_path(problem.path)}: {problem.message}"
        )
    return "\n".join(lines)


def _node_at(root: yaml.Node, path: Sequence[str | int]) -> yaml.Node:
    """The node a JSON path names, or the deepest one on the way that exists."""
    node = root
    for part in path:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            found = next(
                (v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None
            )
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            found = node.value[part]
        else:
            found = None
        if found is None:
            break
        node = found
    return node
