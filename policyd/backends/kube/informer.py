"""A list+watch informer over one resource, delivering plain camelCase JSON dicts to handlers.

The shape of client-go's reflector + store: list (paginated) to get a consistent snapshot and its
resourceVersion, then watch from it with bookmarks; on a dropped connection re-watch from the last
seen resourceVersion with exponential backoff; on 410 Gone (history compacted) relist and reconcile
the local store against the fresh list — objects missing from it get `on_delete`, so deletions that
happened while disconnected are never lost. Handlers run on the informer's own thread.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from policyd.backends.kube.client import JSON, ApiError, KubeClient, PermissionDenied, object_path

log = logging.getLogger(__name__)

Handler = Callable[[JSON], None]
UpdateHandler = Callable[[JSON, JSON], None]


def _strip(obj: JSON) -> None:
    """Drop metadata.managedFields (server-side apply bookkeeping, often the largest part of an
    object, never read by a scheduler), as kube-scheduler's informers do, before storing `obj`."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


@dataclass(frozen=True)
class Resource:
    """Which collection to list and watch: API group version, plural name, kind and optional selectors."""

    api_version: str
    plural: str
    kind: str
    namespace: str | None = None
    field_selector: str | None = None
    label_selector: str | None = None

    @property
    def path(self) -> str:
        """The collection's REST path."""
        return object_path(self.api_version, self.plural, self.namespace)


NODES = Resource("v1", "nodes", "Node")
# kube-scheduler's informer skips terminal pods: they hold no resources and are never scheduled
PODS = Resource("v1", "pods", "Pod", field_selector="status.phase!=Succeeded,status.phase!=Failed")
PRIORITY_CLASSES = Resource("scheduling.k8s.io/v1", "priorityclasses", "PriorityClass")
# the workloads selecting pods, read for kube-scheduler's system default spread constraints
WORKLOADS = (
    Resource("v1", "services", "Service"),
    Resource("v1", "replicationcontrollers", "ReplicationController"),
    Resource("apps/v1", "replicasets", "ReplicaSet"),
    Resource("apps/v1", "statefulsets", "StatefulSet"),
)
# what the volume plugins read, by kind (policyd.scheduler.cluster.volume_store)
STORAGE_RESOURCES = {
    "PersistentVolume": Resource("v1", "persistentvolumes", "PersistentVolume"),
    "PersistentVolumeClaim": Resource("v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    "StorageClass": Resource("storage.k8s.io/v1", "storageclasses", "StorageClass"),
    "CSINode": Resource("storage.k8s.io/v1", "csinodes", "CSINode"),
    "CSIDriver": Resource("storage.k8s.io/v1", "csidrivers", "CSIDriver"),
}


def served_version(client: KubeClient, group: str, versions: tuple[str, ...], plural: str) -> str | None:
    """The first of `versions` (e.g. `("v1", "v1beta1")`) under which `group` serves `plural`, per discovery."""
    for version in versions:
        try:
            doc = client.request("GET", f"/apis/{group}/{version}")
        except ApiError as err:
            if err.not_found:
                continue
            raise
        if any(r.get("name") == plural for r in doc.get("resources", [])):
            return f"{group}/{version}"
    return None


def pdb_resource(client: KubeClient) -> Resource | None:
    """PodDisruptionBudgets from policy/v1, or policy/v1beta1 where v1 is not served (Kubernetes < 1.21)."""
    api_version = served_version(client, "policy", ("v1", "v1beta1"), "poddisruptionbudgets")
    if api_version is None:
        return None
    return Resource(api_version, "poddisruptionbudgets", "PodDisruptionBudget")


def capacity_resource(client: KubeClient) -> Resource | None:
    """CSIStorageCapacities from storage.k8s.io/v1, or v1beta1 (Kubernetes 1.21-1.23); None where neither
    is served (before 1.21 the API was alpha, off by default, as kube-scheduler's capacity check was)."""
    api_version = served_version(client, "storage.k8s.io", ("v1", "v1beta1"), "csistoragecapacities")
    if api_version is None:
        return None
    return Resource(api_version, "csistoragecapacities", "CSIStorageCapacity")


def object_key(obj: JSON) -> str:
    """`namespace/name` (or `name` for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Informer:
    """Lists and watches one resource on a daemon thread, keeping a store and calling handlers."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        on_add: Handler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: Handler | None = None,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        max_backoff: float = 30.0,
        on_forbidden: Callable[[ApiError], None] | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.on_add = on_add
        self.on_update = on_update
        self.on_delete = on_delete
        self.page_size = page_size
        self.watch_timeout_seconds = watch_timeout_seconds
        self.max_backoff = max_backoff
        self.on_forbidden = on_forbidden  # called on 403 (RBAC): the caller decides whether to give up
        self.name = f"informer-{resource.plural}"
        self.relists = 0  # how many full lists were done (1 after the initial sync)
        self.resource_version = ""
        self.store: dict[str, JSON] = {}
        self._store_lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._stream_lock = threading.Lock()
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self._need_relist = True

    # ---- public API -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start (or, after `stop()`, resume from the last resourceVersion) the list+watch thread."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching; the store keeps its contents."""
        self._stop.set()
        with self._stream_lock:
            if self._stream is not None:
                self._stream.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def has_synced(self) -> bool:
        """True once the first list has been delivered to the handlers."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until `has_synced()` (or the timeout); returns whether it synced."""
        return self._synced.wait(timeout)

    def items(self) -> list[JSON]:
        """A copy of the store's objects."""
        with self._store_lock:
            return list(self.store.values())

    def get(self, key: str) -> JSON | None:
        """The stored object with key `namespace/name` (or `name`)."""
        with self._store_lock:
            return self.store.get(key)

    def relist(self) -> None:
        """List everything now and reconcile the store (adds, updates, and deletes of vanished objects)."""
        items, rv = self._list_all()
        with self._store_lock:
            old = dict(self.store)
            fresh = {object_key(o): o for o in items}
            self.store = dict(fresh)
        self.resource_version = rv
        self.relists += 1
        for key, obj in old.items():
            if key not in fresh:
                self._call(self.on_delete, obj)
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                self._call(self.on_add, obj)
            elif _rv(prev) != _rv(obj) or _uid(prev) != _uid(obj):
                if _uid(prev) != _uid(obj):
                    self._call(self.on_delete, prev)
                    self._call(self.on_add, obj)
                else:
                    self._call_update(prev, obj)
        self._need_relist = False
        if not self._synced.is_set():
            log.info("informer synced resource=%s objects=%d rv=%s", self.resource.plural, len(fresh), rv)
        self._synced.set()

    # ---- the loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if self._need_relist:
                    self.relist()
                self._watch()
                backoff = 0.5
            except ApiError as err:
                if self._stop.is_set():
                    return
                if err.gone:
                    log.info("watch expired, relisting resource=%s rv=%s", self.resource.plural, err.message)
                    self._need_relist = True
                    continue
                log.warning(
                    "list/watch failed resource=%s status=%s err=%s retry_in=%.1fs",
                    self.resource.plural,
                    err.status,
                    err,
                    backoff,
                )
                if err.status in (403, 404):
                    self._need_relist = True
                if isinstance(err, PermissionDenied) and self.on_forbidden is not None:
                    self.on_forbidden(err)
                self._stop.wait(backoff * (1 + random.random() * 0.2))
                backoff = min(backoff * 2, self.max_backoff)
            except Exception as err:  # connection reset, bad chunk: reconnect
                if self._stop.is_set():
                    return
                log.warning(
                    "watch broken resource=%s err=%r retry_in=%.1fs", self.resource.plural, err, backoff
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def _list_all(self) -> tuple[list[JSON], str]:
        items: list[JSON] = []
        cont = None
        while True:
            query: dict[str, Any] = {"limit": self.page_size}
            if cont:
                query["continue"] = cont
            if self.resource.field_selector:
                query["fieldSelector"] = self.resource.field_selector
            if self.resource.label_selector:
                query["labelSelector"] = self.resource.label_selector
            try:
                page = self.client.request("GET", self.resource.path, query=query, timeout=60)
            except ApiError as err:
                if err.gone and cont:  # the continue token expired: start over
                    items, cont = [], None
                    continue
                raise
            kind = self.resource.kind
            api_version = self.resource.api_version
            for obj in page.get("items") or []:
                obj.setdefault("kind", kind)
                obj.setdefault("apiVersion", api_version)
                _strip(obj)
                items.append(obj)
            meta = page.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                return items, str(meta.get("resourceVersion", ""))

    def _watch(self) -> None:
        query: dict[str, Any] = {
            "watch": True,
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": int(self.watch_timeout_seconds * (1 + random.random())),
        }
        if self.resource.field_selector:
            query["fieldSelector"] = self.resource.field_selector
        if self.resource.label_selector:
            query["labelSelector"] = self.resource.label_selector
        stream = self.client.stream(
            self.resource.path, query=query, timeout=(10.0, query["timeoutSeconds"] + 30.0)
        )
        with self._stream_lock:
            if self._stop.is_set():
                stream.close()
                return
            self._stream = stream
        try:
            for event in stream:
                if self._stop.is_set():
                    return
                self._handle(event)
        finally:
            with self._stream_lock:
                self._stream = None

    def _handle(self, event: JSON) -> None:
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            code = int(obj.get("code") or 0)
            raise ApiError(
                code, "watch", self.resource.path, str(obj.get("message", "")), obj.get("reason", "")
            )
        rv = _rv(obj)
        if etype == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        _strip(obj)
        key = object_key(obj)
        with self._store_lock:
            prev = self.store.get(key)
            if etype == "DELETED":
                self.store.pop(key, None)
            else:
                self.store[key] = obj
        if rv:
            self.resource_version = rv
        if etype == "ADDED":
            if prev is None:
                self._call(self.on_add, obj)
            else:
                self._call_update(prev, obj)
        elif etype == "MODIFIED":
            if prev is None:
                self._call(self.on_add, obj)
            else:
                self._call_update(prev, obj)
        elif etype == "DELETED":
            self._call(self.on_delete, obj)

    def _call(self, handler: Handler | None, obj: JSON) -> None:
        if handler is None:
            return
        try:
            handler(obj)
        except Exception:
            log.exception("informer handler failed resource=%s key=%s", self.resource.plural, object_key(obj))

    def _call_update(self, old: JSON, new: JSON) -> None:
        if self.on_update is None:
            return
        try:
            self.on_update(old, new)
        except Exception:
            log.exception("informer handler failed resource=%s key=%s", self.resource.plural, object_key(new))


def _rv(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _uid(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def wait_for_cache_sync(informers: list[Informer], timeout: float | None = None) -> bool:
    """Block until every informer has synced (or the timeout passes); returns whether all did."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for inf in informers:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not inf.wait_for_sync(remaining):
            return False
    return True
