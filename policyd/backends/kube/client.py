"""API client construction (kubeconfig, --master, in-cluster) and raw JSON requests with a QPS limit.

Everything policyd sends to the API server goes through `KubeClient.request` / `KubeClient.stream`:
plain camelCase JSON dicts in and out (no generated model classes), one client-side token bucket
(client-go's default 50 QPS, burst 100), and errors mapped onto `ApiError` / `PermissionDenied` whose
messages name the verb and resource, so a missing RBAC rule is obvious. The Python client is used for
its configuration loading only (kubeconfig, in-cluster, credential refresh hooks); requests go over
policyd's own keep-alive connections (`policyd.backends.kube.transport`).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

import yaml

from policyd.backends.kube.transport import (
    ConnectionPool,
    Endpoint,
    Response,
    StreamedResponse,
    parse_proxy,
    request_head,
)
from policyd.errors import PolicydError

if TYPE_CHECKING:  # the kubernetes package loads its configuration only (imported when one is loaded)
    from kubernetes import client as k8s_client

log = logging.getLogger(__name__)

JSON = dict[str, Any]

DEFAULT_QPS = 50.0
DEFAULT_BURST = 100
DEFAULT_TIMEOUT = 30.0
# client-go's rest client: a response that asks to wait (429, or 5xx with Retry-After) is sent again
# after the seconds it names, at most this many times; then its error stands
MAX_RETRY_AFTER_RETRIES = 10
MAX_RETRY_AFTER_SECONDS = 60.0  # a longer wait named by the server is cut to this


def retry_after(status: int, headers: Mapping[str, str]) -> float | None:
    """Seconds the API server asked to wait before sending the request again (client-go's
    `checkWait`: status 429 or >= 500 with an integer `Retry-After`), or None."""
    if status != 429 and status < 500:
        return None
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = int(value.strip())
    except ValueError:
        return None
    return min(float(max(seconds, 0)), MAX_RETRY_AFTER_SECONDS)


POOL_SIZE = 64  # idle keep-alive connections kept per client
# how long a credential read through the configuration's refresh hook is reused; the Python client's
# kubeconfig hook re-applies the whole kubeconfig to the configuration on every call (a quarter of
# the GIL time of a request), and it reloads a credential only once expired; a request answered 401
# with a reused credential reads it afresh and is sent once more
CREDENTIAL_REUSE_SECONDS = 5.0

VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class ApiError(PolicydError):
    """An API request failed; `status` is the HTTP status (0 when the server could not be reached)."""

    def __init__(self, status: int, verb: str, path: str, message: str, reason: str = "") -> None:
        self.status = status
        self.verb = verb
        self.path = path
        self.reason = reason
        self.message = message
        super().__init__(f"{verb} {path}: {status} {reason}: {message}".replace(" : ", ": "))

    @property
    def conflict(self) -> bool:
        """HTTP 409: the object changed (or exists) meanwhile."""
        return self.status == 409

    @property
    def not_found(self) -> bool:
        """HTTP 404: the object (or the resource type) does not exist."""
        return self.status == 404

    @property
    def gone(self) -> bool:
        """HTTP 410: the requested resourceVersion is too old."""
        return self.status == 410

    @property
    def transient(self) -> bool:
        """The server could not be reached, was overloaded (429) or failed (5xx): worth trying again."""
        return self.status == 0 or self.status == 429 or self.status >= 500


class PermissionDenied(ApiError):
    """HTTP 403: RBAC does not allow this verb on this resource."""

    def __init__(self, verb: str, path: str, message: str) -> None:
        resource = resource_of(path)
        super().__init__(403, verb, path, message, "Forbidden")
        self.resource = resource
        self.args = (
            f"permission denied: cannot {verb} {resource} ({path}); grant the verb '{verb}' on "
            f"'{resource}' to policyd's service account (see deploy/clusterrole.yaml). Server said: {message}",
        )


def resource_of(path: str) -> str:
    """The RBAC resource name (`pods/binding`, `leases.coordination.k8s.io`) a request path addresses."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    group = ""
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        group = parts[1] if len(parts) > 1 else ""
        parts = parts[3:]
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    if not parts:
        return "namespaces" if group == "" else group
    name = parts[0]
    if len(parts) > 2:
        name = f"{parts[0]}/{parts[2]}"
    return f"{name}.{group}" if group else name


class RateLimiter:
    """A token bucket: `qps` tokens per second, at most `burst` saved up; `acquire` blocks for one."""

    def __init__(self, qps: float = DEFAULT_QPS, burst: int = DEFAULT_BURST) -> None:
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._tokens = float(self.burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one token; returns how long the caller must wait before using it (0 when available)."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = time.monotonic()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self.qps

    def acquire(self) -> None:
        """Block until a token is available."""
        delay = self.reserve()
        if delay > 0:
            time.sleep(delay)


def load_configuration(
    kubeconfig: str | None = None, master: str | None = None, context: str | None = None
) -> k8s_client.Configuration:
    """Client configuration from a kubeconfig file, else in-cluster; `master` overrides the server URL;
    `context` picks a kubeconfig context other than the current one."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    if kubeconfig:
        load_kubeconfig(kubeconfig, cfg, context)
    elif master:
        cfg.host = master
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except k8s_config.ConfigException:
            try:
                k8s_config.load_kube_config(client_configuration=cfg, persist_config=False, context=context)
            except (k8s_config.ConfigException, OSError, TypeError) as err:
                raise PolicydError(
                    "no cluster configuration: not running in a pod and no kubeconfig found; "
                    "pass --kubeconfig or --master"
                ) from err
    if master:
        cfg.host = master.rstrip("/")
    return cfg


def load_kubeconfig(path: str, cfg: k8s_client.Configuration, context: str | None = None) -> None:
    """Fill `cfg` from the current context (or `context`) of kubeconfig `path`; raises PolicydError naming the file."""
    if not os.path.isfile(path):
        raise PolicydError(
            f"kubeconfig {path}: no such file"
            if not os.path.exists(path)
            else f"kubeconfig {path}: not a file"
        )
    from kubernetes import config as k8s_config

    try:
        k8s_config.load_kube_config(
            config_file=path, client_configuration=cfg, persist_config=False, context=context
        )
    except k8s_config.ConfigException as err:
        raise PolicydError(f"kubeconfig {path}: {_kubeconfig_problem(str(err))}") from err
    except (OSError, ValueError, TypeError, AttributeError, IndexError, KeyError, yaml.YAMLError) as err:
        raise PolicydError(
            f"kubeconfig {path}: not a usable kubeconfig: {' '.join(str(err).split())}"
        ) from err


def _kubeconfig_problem(text: str) -> str:
    """The kubernetes client's complaint about a kubeconfig, in a user's words."""
    if "current-context" in text:
        return "no current-context set (kubectl config use-context NAME)"
    if "file is empty" in text or "No configuration found" in text:
        return "the file is empty"
    missing = re.search(r"Expected object with name (\S*) in .*/(\w+) list", text)
    if missing is not None:
        name, kind = missing.groups()
        return f"refers to {kind.rstrip('s')} {name!r}, which is not in its {kind} list"
    return text


class KubeClient:
    """Raw JSON access to the API server over pooled keep-alive connections, limited by a token bucket."""

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        user_agent: str = "policyd",
    ) -> None:
        if not configuration.verify_ssl:
            _warn_insecure_once(str(configuration.host))
        self.configuration = configuration
        self.user_agent = user_agent
        self._pool = ConnectionPool(endpoint_of(configuration), maxsize=POOL_SIZE)
        self._credential = ""
        self._credential_read = -CREDENTIAL_REUSE_SECONDS  # monotonic time it was read
        self._credential_lock = threading.Lock()
        self.limiter = RateLimiter(qps, burst)
        self.qps = float(qps)
        self.burst = int(burst)
        # optional observer called with (verb, path, status) after each request (metrics, tests)
        self.on_response: Callable[[str, str, int], None] | None = None

    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        master: str | None = None,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        context: str | None = None,
    ) -> KubeClient:
        """A client for the cluster named by a kubeconfig / URL (and context), or the in-cluster service account."""
        return cls(load_configuration(kubeconfig, master, context), qps=qps, burst=burst)

    def sibling(self, user_agent: str) -> KubeClient:
        """A client for the same server and credentials with its own connections and its own QPS/burst.

        kube-scheduler gives events (and leader election) their own clientset, each with the
        configured QPS/burst; policyd's event recorder uses a sibling the same way, so Events never
        take tokens from binds.
        """
        configuration = copy.copy(self.configuration)
        return KubeClient(configuration, qps=self.qps, burst=self.burst, user_agent=user_agent)

    @property
    def endpoint(self) -> Endpoint:
        """Where requests go (address, path prefix, TLS context, proxy)."""
        return self._pool.endpoint

    @property
    def host(self) -> str:
        """The API server URL."""
        return str(self.configuration.host)

    def authorization(self, fresh: bool = False) -> tuple[str, bool]:
        """(Authorization header value or "", whether it was read now rather than reused)."""
        with self._credential_lock:
            now = time.monotonic()
            if not fresh and now - self._credential_read < CREDENTIAL_REUSE_SECONDS:
                return self._credential, False
            # the refresh hook renews expiring credentials (exec plugins, OIDC) before they are read
            value = self.configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
            self._credential, self._credential_read = value or "", now
            return self._credential, True

    def request_head(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        content_type: str | None,
        body_length: int | None,
        authorization: str,
    ) -> bytes:
        """The encoded request line and headers."""
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None]
        target = self._pool.endpoint.prefix + path + (f"?{urlencode(params)}" if params else "")
        headers = {
            "Host": self._pool.endpoint.host_header,
            "User-Agent": self.user_agent,
            "Accept": "application/json",
        }
        if authorization:
            headers["Authorization"] = authorization
        if body_length is not None:
            headers["Content-Type"] = content_type or "application/json"
        return request_head(method, target, headers, body_length)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        decode: bool = True,
    ) -> JSON:
        """Send one request; returns the decoded JSON response, or {} without `decode` (raises
        `ApiError` on non-2xx)."""
        resp = self._exchange(method, path, query, body, content_type, timeout)
        if not decode or not resp.body:
            return {}
        decoded = json.loads(resp.body)
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    def text(self, path: str, timeout: float | None = DEFAULT_TIMEOUT) -> str:
        """GET `path` and return the body as text (e.g. the API server's /metrics); raises `ApiError`
        on non-2xx."""
        resp = self._exchange("GET", path, None, None, None, timeout)
        return bytes(resp.body).decode("utf-8", "replace")

    def _exchange(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeout: float | None,
    ) -> Response:
        """Send one request (a token per send, resent after a 401 with a fresh credential and after
        Retry-After waits); the response, raising `ApiError` on non-2xx."""
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        length = None if payload is None else len(payload)
        verb = VERBS.get(method, method.lower())
        authorization, fresh = self.authorization()
        waits = 0
        # waits asked for by the server end with the request's timeout (a lease renewal must not sleep past it)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.limiter.acquire()  # every request sent takes a token, a resent one too
            head = self.request_head(method, path, query, content_type, length, authorization)
            try:
                resp = self._pool.request(method, head, payload, timeout)
            except (OSError, ValueError) as err:
                raise ApiError(0, verb, path, str(err) or repr(err), "Unreachable") from err
            if resp.status == 401 and not fresh:
                authorization, fresh = self.authorization(fresh=True)
                continue
            wait = retry_after(resp.status, resp.headers)
            if wait is None or waits >= MAX_RETRY_AFTER_RETRIES:
                break
            if deadline is not None and time.monotonic() + wait > deadline:
                break
            waits += 1
            log.info(
                "api server asked to wait verb=%s path=%s status=%s seconds=%g", verb, path, resp.status, wait
            )
            time.sleep(wait)
        if self.on_response is not None:
            self.on_response(verb, path, resp.status)
        if not 200 <= resp.status <= 299:
            raise error_from(resp.status, verb, path, resp.body)
        return resp

    def stream(
        self,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        timeout: tuple[float, float] = (10.0, 330.0),
    ) -> WatchStream:
        """Open a streaming GET (a watch) on a connection of its own; iterate the result for decoded JSON lines."""
        head = self.request_head("GET", path, query, None, None, self.authorization(fresh=True)[0])
        self.limiter.acquire()
        try:
            resp = self._pool.open_stream("GET", head, timeout[0], timeout[1])
        except (OSError, ValueError) as err:
            raise ApiError(0, "get", path, str(err) or repr(err), "Unreachable") from err
        if self.on_response is not None:
            self.on_response("get", path, resp.status)
        if not 200 <= resp.status <= 299:
            try:
                data = resp.read()
            except (OSError, ValueError):
                data = b""
            raise error_from(resp.status, "get", path, data)
        return WatchStream(resp)

    def close(self) -> None:
        """Close the idle connections."""
        self._pool.close()


class WatchStream:
    """The newline-delimited JSON events of one open watch response; `close()` from any thread."""

    def __init__(self, response: StreamedResponse) -> None:
        self._response = response

    def __iter__(self) -> Iterator[JSON]:
        buf = b""
        for chunk in self._response.chunks():
            buf = buf + chunk if buf else chunk
            start = 0
            while True:
                end = buf.find(b"\n", start)
                if end < 0:
                    break
                if end > start:
                    yield json.loads(buf[start:end])
                start = end + 1
            buf = buf[start:]
        if buf.strip():
            yield json.loads(buf)

    def close(self) -> None:
        """Abort the stream (unblocks a reader on another thread)."""
        self._response.close()


def endpoint_of(configuration: k8s_client.Configuration) -> Endpoint:
    """Where a client configuration points, with its TLS settings and proxy."""
    url = str(configuration.host)
    hostname = urlsplit(url if "://" in url else f"https://{url}").hostname or ""
    server_hostname = configuration.tls_server_name or (
        configuration.assert_hostname if isinstance(configuration.assert_hostname, str) else hostname
    )
    proxy = None
    if configuration.proxy and not bypasses_proxy(hostname, configuration.no_proxy or ""):
        proxy = parse_proxy(str(configuration.proxy), configuration.proxy_headers)
    return Endpoint.parse(url, ssl_context_of(configuration), server_hostname, proxy)


def ssl_context_of(configuration: k8s_client.Configuration) -> ssl.SSLContext:
    """The TLS context of a client configuration: CA (or the system store), client certificate, checks."""
    if configuration.verify_ssl:
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        if configuration.assert_hostname is False:
            context.check_hostname = False
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context


def bypasses_proxy(hostname: str, no_proxy: str) -> bool:
    """True when `hostname` matches an entry of a comma-separated no_proxy list (`*` matches all)."""
    host = hostname.lower()
    for entry in (e.strip().lower().lstrip(".") for e in no_proxy.split(",")):
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return True
    return False


_insecure_warned = threading.Event()


def _warn_insecure_once(host: str) -> None:
    """Log once that TLS verification is off."""
    if _insecure_warned.is_set():
        return
    _insecure_warned.set()
    log.warning("TLS verification is off (insecure-skip-tls-verify) server=%s", host)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def error_from(status: int, verb: str, path: str, data: bytes) -> ApiError:
    """The `ApiError` of a non-2xx answer (`PermissionDenied` for an RBAC 403), from its Status body."""
    message, reason = "", ""
    try:
        decoded = json.loads(data)
        message = str(decoded.get("message", ""))
        reason = str(decoded.get("reason", ""))
    except (ValueError, AttributeError):
        message = data.decode("utf-8", "replace")[:500]
    # a 403 from admission (namespace terminating) is not an RBAC denial
    if status == 403 and "is being terminated" not in message:
        return PermissionDenied(verb, path, message)
    return ApiError(status, verb, path, message, reason)


def object_path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a collection or object: `/api/v1/namespaces/ns/pods/name`."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    return base
