"""`policyd run`: schedule the pods of a real cluster through the API server.

Startup: configuration, client, an RBAC preflight (every missing permission named; tried again while
the API server is unreachable or failing), serving endpoints, policies (files and/or ConfigMaps,
hot-reloaded), informers (started at once, so a standby has warm caches), then — as leader, or at
once without leader election — the scheduling loop once the caches have synced. SIGTERM/SIGINT: stop
popping, finish in-flight binds, release the lease, exit 0 (also while waiting for the API server). A
leader that cannot renew stops scheduling before the lease can pass to another and exits 1.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from policyd import __version__, lifecycle
from policyd.backends.kube.api_backend import ApiBackend, missing_permissions
from policyd.backends.kube.client import ApiError, KubeClient
from policyd.backends.kube.events import WARNING, ObjectRef
from policyd.backends.kube.informer import Informer, Resource
from policyd.backends.kube.leader import LeaderElectionConfig, LeaderElector, default_identity
from policyd.errors import PolicydError, PolicyError, error_text, unplaced
from policyd.framework import CompiledPolicySet
from policyd.scheduler.metrics import SchedulerMetrics
from policyd.scheduler.queue import QueueConfig
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions
from policyd.service import config as configuration
from policyd.service import tls
from policyd.service.authentication import DelegatedAuthenticator
from policyd.service.authorization import DelegatedAuthorizer
from policyd.service.config import Config, PolicySourceRef, SecureServing
from policyd.service.delegated_auth import DelegatedAccess
from policyd.service.http import Passed, ServingEndpoints
from policyd.service.reload import ConfigMapSource, FileSource, PolicyReloader, PolicySource, ReloadOutcome

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_LOST_LEASE = 1
RELOAD_FAILED = "PolicyReloadFailed"  # reason of the Warning Event on a policy ConfigMap
# the start-up checks tried again while the API server is unreachable, after 0.5 s, 1 s, ... 30 s
PREFLIGHT_FIRST_RETRY = 0.5
PREFLIGHT_MAX_RETRY = 30.0
CONFIGMAP_DEBOUNCE = 0.02  # a ConfigMap update is one atomic event: no burst of saves to wait out
# what delegated authentication/authorization create with the client connection's credentials
TOKEN_REVIEW_PERMISSION = ("create", "authentication.k8s.io", "tokenreviews")
ACCESS_REVIEW_PERMISSION = ("create", "authorization.k8s.io", "subjectaccessreviews")
SECURE_FLAGS = (
    "tls_cert_file",
    "tls_private_key_file",
    "client_ca_file",
    "authentication_kubeconfig",
    "authorization_kubeconfig",
)


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _duration(text: str) -> float:
    """Seconds from a Go-style duration (`10s`, `500ms`, `1m`) or a bare number of seconds."""
    value = text.strip()
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if value.endswith(suffix):
            value, factor = value[: -len(suffix)], scale
            break
    else:
        factor = 1.0
    try:
        seconds = float(value) * factor
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 10s, got {text!r}") from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"expected a duration of 0 or more, got {text!r}")
    return seconds


def _paths(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    parser.add_argument("--master", help="API server URL (overrides the kubeconfig's server)")
    parser.add_argument("--config", help="policyd.yaml (policyd/schemas/config.schema.json)")
    parser.add_argument(
        "--policies",
        nargs="+",
        action="extend",
        metavar="PATH",
        help="policy files or directories for every profile (overrides the config's sources)",
    )
    parser.add_argument(
        "--leader-elect", type=_bool, nargs="?", const=True, default=None, metavar="true|false"
    )
    parser.add_argument("--lease", metavar="NAMESPACE/NAME", help="the leader-election Lease")
    parser.add_argument("--bind-address", help="address of the health/metrics server (default 127.0.0.1)")
    ports = parser.add_mutually_exclusive_group()
    ports.add_argument(
        "--secure-port",
        type=int,
        help="HTTPS port of /healthz, /metrics, ... with delegated authentication (default 10259; 0: any)",
    )
    ports.add_argument(
        "--port",
        type=int,
        help="serve plain HTTP without authentication on this port instead (local use only; 0: any)",
    )
    parser.add_argument("--tls-cert-file", help="serving certificate (default: self-signed, in memory)")
    parser.add_argument("--tls-private-key-file", help="private key of --tls-cert-file")
    parser.add_argument(
        "--client-ca-file", help="CA whose client certificates authenticate (CN user, O groups)"
    )
    parser.add_argument(
        "--authentication-kubeconfig", help="where TokenReviews are created (default: the cluster connection)"
    )
    parser.add_argument(
        "--authorization-kubeconfig",
        help="where SubjectAccessReviews are created (default: the cluster connection)",
    )
    parser.add_argument(
        "--authorization-always-allow-paths",
        type=_paths,
        metavar="PATHS",
        help="comma-separated paths served without authorization (default /healthz,/readyz,/livez)",
    )
    parser.add_argument("--authentication-token-webhook-cache-ttl", type=_duration, metavar="DURATION")
    parser.add_argument("--authorization-webhook-cache-authorized-ttl", type=_duration, metavar="DURATION")
    parser.add_argument("--authorization-webhook-cache-unauthorized-ttl", type=_duration, metavar="DURATION")
    parser.add_argument("--write-config-to", metavar="FILE", help="write the default configuration and exit")


def effective_config(args: argparse.Namespace) -> Config:
    """The config file (or defaults) with the command-line flags applied."""
    cfg = configuration.load(args.config)
    raw: dict[str, Any] = dict(cfg.raw)
    if args.policies:
        raw["profiles"] = [
            {"schedulerName": p.scheduler_name, "policySources": [{"path": path} for path in args.policies]}
            for p in cfg.profiles
        ]
    if args.leader_elect is not None:
        raw["leaderElection"] = dict(raw["leaderElection"], leaderElect=args.leader_elect)
    if args.lease:
        ns, _, name = args.lease.partition("/")
        if not ns or not name:
            raise PolicydError(f"--lease: expected NAMESPACE/NAME, got {args.lease!r}")
        raw["leaderElection"] = dict(raw["leaderElection"], resourceNamespace=ns, resourceName=name)
    raw["serving"] = _serving_flags(args, raw["serving"])
    client = dict(raw["clientConnection"])
    if args.kubeconfig:
        client["kubeconfig"] = args.kubeconfig
    if args.master:
        client["master"] = args.master
    raw["clientConnection"] = client
    return configuration.from_dict(raw, args.config or "<flags>")


def _serving_flags(args: argparse.Namespace, serving: dict[str, Any]) -> dict[str, Any]:
    """The `serving` section with the serving flags applied."""
    out = {key: dict(value) if isinstance(value, dict) else value for key, value in serving.items()}
    if args.port is not None:
        given = [f"--{flag.replace('_', '-')}" for flag in SECURE_FLAGS if vars(args)[flag]]
        if given:
            raise PolicydError(
                f"--port serves plain HTTP, which has no {', '.join(given)}: use --secure-port"
            )
        out.update(port=args.port, insecure=True)
    if args.secure_port is not None:
        out.update(port=args.secure_port, insecure=False)
    if args.bind_address:
        out["bindAddress"] = args.bind_address
    for flag, section, key in (
        ("tls_cert_file", "tls", "certFile"),
        ("tls_private_key_file", "tls", "privateKeyFile"),
        ("client_ca_file", "tls", "clientCAFile"),
        ("authentication_kubeconfig", "authentication", "kubeconfig"),
        ("authorization_kubeconfig", "authorization", "kubeconfig"),
        ("authorization_always_allow_paths", "authorization", "alwaysAllowPaths"),
        ("authentication_token_webhook_cache_ttl", "authentication", "cacheTTLSeconds"),
        ("authorization_webhook_cache_authorized_ttl", "authorization", "allowCacheTTLSeconds"),
        ("authorization_webhook_cache_unauthorized_ttl", "authorization", "denyCacheTTLSeconds"),
    ):
        value = vars(args)[flag]
        if value is not None:
            out[section][key] = value
    return out


def policy_sources(cfg: Config) -> tuple[list[PolicySource], ConfigMapSource | None]:
    """Reload sources for every configured source (the union over profiles)."""
    sources: list[PolicySource] = []
    paths = cfg.policy_paths()
    if paths:
        sources.append(FileSource(paths))
    maps = [ref.config_map for ref in cfg.config_map_sources()]
    cm = ConfigMapSource(maps) if maps else None
    if cm is not None:
        sources.append(cm)
    return sources, cm


def only_profiles(cfg: Config, policies: CompiledPolicySet) -> CompiledPolicySet:
    """Keep the profiles of the configured scheduler names; a configured name with no policy is an error."""
    problem = cfg.undeclared_profiles(policies.profiles)
    if problem:
        raise PolicyError(unplaced(problem, "config", "<config>"))
    return CompiledPolicySet(
        generation=policies.generation,
        content_hash=policies.content_hash,
        profiles={n: p for n, p in policies.profiles.items() if n in cfg.scheduler_names},
        sources=policies.sources,
    )


class Runner:
    """One `policyd run` process: owns every long-lived part and the shutdown order."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.stop = threading.Event()  # SIGTERM / SIGINT
        self.lost = threading.Event()  # leadership lost
        self.fatal: list[str] = []
        self.sched_stop = threading.Event()
        self.sched_thread: threading.Thread | None = None
        self.identity = default_identity()
        self.client = KubeClient.connect(
            cfg.kubeconfig or None, cfg.master or None, qps=cfg.qps, burst=cfg.burst
        )
        self.metrics = SchedulerMetrics()
        self.review_clients: dict[str, KubeClient] = {}  # kubeconfig ("": the run's) -> client
        self.server = ServingEndpoints(
            self.metrics.registry, address=cfg.bind_address, port=cfg.port, configz=lambda: cfg.raw
        )
        # registered before the server starts: /readyz fails until the policies are loaded and the
        # caches synced, not only while the checks are missing
        self.server.readyz.add("informer-sync", self._synced_check)
        self.server.readyz.add("policy", self._policy_check)
        if cfg.secure is not None:
            self._serve_securely(cfg.secure)
        self.scheduler: Scheduler | None = None
        self.backend: ApiBackend | None = None
        self.elector: LeaderElector | None = None
        self.reloader: PolicyReloader | None = None
        self.cm_informers: list[Informer] = []
        self.cm_uids: dict[str, str] = {}  # "namespace/name" -> uid of the policy ConfigMaps seen

    # ---- startup ----------------------------------------------------------------------------------

    def _synced_check(self) -> str | None:
        """Readiness of the caches: every informer delivered its initial list."""
        backend = self.backend
        return None if backend is not None and backend.has_synced() else "caches not synced"

    def _policy_check(self) -> str | Passed:
        """Readiness of the policy set (not ready before the first load)."""
        return "policies not loaded" if self.reloader is None else _policy_check(self.reloader)

    def _serve_securely(self, secure: SecureServing) -> None:
        """HTTPS (a self-signed certificate without files) and delegated authentication/authorization."""
        generated = None
        if not secure.cert_file:
            generated = tls.self_signed(tls.default_hosts(self.cfg.bind_address))
        self.server.tls = tls.server_context(
            secure.cert_file, secure.key_file, secure.client_ca_file, generated
        )
        self.server.access = DelegatedAccess(
            DelegatedAuthenticator(
                self._review_client(secure.authentication_kubeconfig), secure.token_cache_ttl
            ),
            DelegatedAuthorizer(
                self._review_client(secure.authorization_kubeconfig),
                secure.always_allow_paths,
                secure.allow_cache_ttl,
                secure.deny_cache_ttl,
            ),
        )

    def _review_client(self, kubeconfig: str) -> KubeClient:
        """The client TokenReviews / SubjectAccessReviews go through (own connections and rate limit)."""
        if kubeconfig not in self.review_clients:
            self.review_clients[kubeconfig] = (
                KubeClient.connect(kubeconfig, qps=self.cfg.qps, burst=self.cfg.burst)
                if kubeconfig
                else self.client.sibling("policyd/delegated-auth")
            )
        return self.review_clients[kubeconfig]

    def _review_permissions(self) -> tuple[tuple[str, str, str], ...]:
        """Review permissions the run's own credentials need (those no separate kubeconfig provides)."""
        secure = self.cfg.secure
        if secure is None:
            return ()
        needed = []
        if not secure.authentication_kubeconfig:
            needed.append(TOKEN_REVIEW_PERMISSION)
        if not secure.authorization_kubeconfig:
            needed.append(ACCESS_REVIEW_PERMISSION)
        return tuple(needed)

    def preflight(self) -> None:
        """Fail early, naming every permission the service account lacks."""
        le = self.cfg.leader_election
        cm_namespaces = tuple(sorted({s.config_map_ref[0] for s in self.cfg.config_map_sources()}))
        missing = missing_permissions(
            self.client, le.namespace if le.leader_elect else None, cm_namespaces, self._review_permissions()
        )
        if missing:
            raise PolicydError(
                "permission denied: policyd's credentials lack: "
                + "; ".join(missing)
                + " (grant them as deploy/clusterrole.yaml does)"
            )

    def preflight_when_reachable(self) -> None:
        """`preflight`, tried again while the API server is unreachable or failing (as kube-scheduler
        waits for it rather than exiting): a scheduler started during an API server outage comes up
        when the server does, not after its pod's crash-loop backoff. Not ready meanwhile; a signal
        stops the waiting (`ApiError` raised); permission and authentication errors are final."""
        delay = PREFLIGHT_FIRST_RETRY
        while True:
            try:
                self.preflight()
                return
            except ApiError as err:
                if not err.transient:
                    raise
                log.warning("API server not answering; retrying err=%s retry_in=%.1fs", err, delay)
                if self.stop.wait(delay):
                    raise
                delay = min(delay * 2, PREFLIGHT_MAX_RETRY)

    def load_policies(self) -> CompiledPolicySet:
        """Start policy sources (ConfigMap informers first) and compile the first set."""
        sources, cm = policy_sources(self.cfg)
        cfg = self.cfg

        def swap(new: CompiledPolicySet) -> None:
            if self.scheduler is not None:
                self.scheduler.set_policies(new)

        from policyd.compiler.profiles import compile_sources

        self.reloader = PolicyReloader(
            sources,
            swap,
            metrics=self.metrics,
            compile_fn=lambda texts, gen: only_profiles(
                cfg, compile_sources(texts, generation=gen, scopes=cfg.scopes(texts))
            ),
            on_error=self._reload_failed,
            allow_profile_removal=self.cfg.allow_profile_removal,
        )
        if cm is not None:
            self._watch_config_maps(cm, [s for s in self.cfg.config_map_sources()])
        return self.reloader.load_initial()

    def _watch_config_maps(self, cm: ConfigMapSource, refs: list[PolicySourceRef]) -> None:
        for src in refs:
            ns, name = src.config_map_ref

            def changed(obj: dict[str, Any], ns: str = ns, name: str = name) -> None:
                self.cm_uids[f"{ns}/{name}"] = str((obj.get("metadata") or {}).get("uid") or "")
                if cm.update(ns, name, obj.get("data") or {}) and self.reloader is not None:
                    self.reloader.request(f"configmap {ns}/{name}", debounce=CONFIGMAP_DEBOUNCE)

            def deleted(obj: dict[str, Any], ns: str = ns, name: str = name) -> None:
                self.cm_uids.pop(f"{ns}/{name}", None)
                if cm.update(ns, name, None) and self.reloader is not None:
                    self.reloader.request(f"configmap {ns}/{name} deleted", debounce=CONFIGMAP_DEBOUNCE)

            def updated(_old: dict[str, Any], new: dict[str, Any], f: Any = changed) -> None:
                f(new)

            inf = Informer(
                self.client,
                Resource(
                    "v1", "configmaps", "ConfigMap", namespace=ns, field_selector=f"metadata.name={name}"
                ),
                on_add=changed,
                on_update=updated,
                on_delete=deleted,
            )
            inf.start()
            self.cm_informers.append(inf)
        for inf in self.cm_informers:
            if not inf.wait_for_sync(30):
                raise PolicydError(f"could not list ConfigMap {inf.resource.namespace} in 30s")

    def _reload_failed(self, outcome: ReloadOutcome) -> None:
        """A Warning Event on each ConfigMap the errors point into (or on every policy ConfigMap)."""
        if self.backend is None or not self.cm_uids:
            return  # the first load: its error stops the process and is printed
        blamed = [n for n in outcome.config_maps() if n in self.cm_uids] or sorted(self.cm_uids)
        assert self.reloader is not None
        message = f"policy reload failed, keeping generation {self.reloader.status.generation}: "
        for key in blamed:
            ns, _, name = key.partition("/")
            ref = ObjectRef("ConfigMap", ns, name, self.cm_uids.get(key, ""))
            self.backend.recorder.event(ref, WARNING, RELOAD_FAILED, message + outcome.first_error)

    def start(self) -> None:
        """Everything up to (not including) scheduling."""
        cfg, le = self.cfg, self.cfg.leader_election
        lifecycle.starting(
            __version__,
            (
                ("identity", self.identity),
                ("profiles", ",".join(cfg.scheduler_names)),
                (
                    "policies",
                    ",".join([*cfg.policy_paths(), *(s.config_map for s in cfg.config_map_sources())]),
                ),
                ("apiServer", self.client.host),
                ("leaderElect", le.leader_elect),
                ("lease", f"{le.namespace}/{le.name}" if le.leader_elect else "-"),
                ("percentageOfNodesToScore", cfg.percentage_of_nodes_to_score),
                ("bindParallelism", cfg.bind_parallelism),
                ("port", cfg.port),
                ("serving", "http (no authentication)" if cfg.secure is None else "https+delegated-auth"),
            ),
        )
        self.server.start()
        self.preflight_when_reachable()
        policies = self.load_policies()
        assert self.reloader is not None
        self.backend = ApiBackend(self.client, identity=self.identity)
        self.backend.on_fatal = self._fatal
        self.metrics.watch_events(self.backend.recorder.stats)
        cfg = self.cfg
        options = SchedulerOptions(
            percentage_of_nodes_to_score=cfg.percentage_of_nodes_to_score,
            queue=QueueConfig(initial_backoff=cfg.backoff_initial, max_backoff=cfg.backoff_max),
            bind_workers=cfg.bind_parallelism,
        )
        self.scheduler = Scheduler(policies, self.backend, options=options, metrics=self.metrics)
        self.reloader.start()
        self.backend.start(self.scheduler)

    def _fatal(self, err: ApiError) -> None:
        self.fatal.append(str(err))
        self.stop.set()

    # ---- scheduling and leadership ----------------------------------------------------------------

    def start_scheduling(self) -> None:
        """Run the scheduling loop (after the caches synced) on its own thread."""
        assert self.scheduler is not None and self.backend is not None
        scheduler, backend = self.scheduler, self.backend

        def loop() -> None:
            while not backend.wait_for_sync(1.0):
                if self.sched_stop.is_set():
                    return
            log.info(
                "scheduling started identity=%s profiles=%s",
                self.identity,
                ",".join(self.cfg.scheduler_names),
            )
            try:
                scheduler.run(self.sched_stop)
            except Exception as exc:  # noqa: BLE001 - reported, then the process ends (below)
                # as kube-scheduler crashes on a panic in a cycle: a leader that no longer schedules
                # must not keep its lease; the process exits 1, the lease is released, a standby (or
                # the restarted pod) takes over
                log.exception("scheduling loop failed identity=%s", self.identity)
                self.fatal.append(f"scheduling loop failed: {type(exc).__name__}: {exc}")
                self.stop.set()
                return
            log.info("scheduling stopped identity=%s", self.identity)

        self.sched_thread = threading.Thread(target=loop, name="scheduling", daemon=True)
        self.sched_thread.start()

    def stop_scheduling(self, timeout: float = 30.0) -> None:
        """Stop popping pods and wait for in-flight binds to finish."""
        self.sched_stop.set()
        if self.sched_thread is not None:
            self.sched_thread.join(timeout)

    def _lost_leadership(self) -> None:
        # called on the elector's thread, before the lease can pass to another candidate
        le = self.cfg.leader_election
        self.stop_scheduling(timeout=max(0.5, le.lease_duration - le.renew_deadline - 0.5))
        self.lost.set()
        self.stop.set()

    def campaign(self) -> None:
        """Lead (or wait to lead) then schedule; without leader election schedule at once."""
        le = self.cfg.leader_election
        if not le.leader_elect:
            self.start_scheduling()
            return
        self.elector = LeaderElector(
            self.client,
            LeaderElectionConfig(
                le.namespace, le.name, le.lease_duration, le.renew_deadline, le.retry_period
            ),
            identity=self.identity,
            on_started_leading=self.start_scheduling,
            on_stopped_leading=self._lost_leadership,
        )
        self.elector.start()

    def wait(self) -> None:
        """Until a signal, lost leadership or a fatal error; keeps the queue gauges fresh."""
        while not self.stop.wait(1.0):
            if self.scheduler is not None:
                pending = self.scheduler.queue.pending()
                self.metrics.set_pending(
                    pending["active"], pending["backoff"], pending["unschedulable"], pending["gated"]
                )

    def shutdown(self) -> None:
        """Graceful stop: readiness off, no more pops, binds finished, lease released, writes flushed."""
        self.server.mark_shutting_down()
        self.stop_scheduling()
        if self.elector is not None and not self.lost.is_set():
            self.elector.release()
        if self.backend is not None:
            self.backend.stop()
        for inf in self.cm_informers:
            inf.stop()
        if self.reloader is not None:
            self.reloader.stop()
        self.server.stop()
        for client in self.review_clients.values():
            client.close()
        self.client.close()


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    if args.write_config_to:
        configuration.write_defaults(args.write_config_to)
        return EXIT_OK
    try:
        cfg = effective_config(args)
        runner = Runner(cfg)
    except PolicydError as err:
        print(f"policyd run: {error_text(err)}", file=sys.stderr)
        return EXIT_ERROR

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal received signal=%s", signal.Signals(signum).name)
        runner.stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            runner.start()
            runner.campaign()
        except ApiError as err:
            if runner.stop.is_set():  # a signal while waiting for the API server: a clean stop
                runner.shutdown()
                return EXIT_OK
            print(
                f"policyd run: error: cannot talk to the API server at {runner.client.host}: {err}",
                file=sys.stderr,
            )
            runner.shutdown()
            return EXIT_ERROR
        except PolicydError as err:
            print(f"policyd run: {error_text(err)}", file=sys.stderr)
            runner.shutdown()
            return EXIT_ERROR
        runner.wait()
        runner.shutdown()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if runner.fatal:
        print(f"policyd run: error: {runner.fatal[0]}", file=sys.stderr)
        return EXIT_ERROR
    if runner.lost.is_set():
        print("policyd run: error: leader election lost (could not renew the lease)", file=sys.stderr)
        return EXIT_LOST_LEASE
    return EXIT_OK


def _policy_check(reloader: PolicyReloader) -> str | Passed:
    """Readiness of the policy set: failed before a first load; a failed reload is shown, not fatal."""
    ready, detail = reloader.readiness()
    return Passed(detail) if ready else detail
