"""The real side: kube-scheduler 1.20.2 on a real kube-apiserver + etcd, fed one pending pod at a time.

kube-scheduler runs with `-v=10` and two profiles. `default-scheduler` is the default profile; its
cycle for each pod logs every score plugin's weighted scores per feasible node ("Plugin %s scores on
ns/name => [{node score} ...]", generic_scheduler.go prioritizeNodes, v1.20) and, when nothing fits, the
FitError histogram lands in the PodScheduled condition. 1.20 logs no per-node filter verdicts, so a
second profile, `diffharness-probe`, has the same filters plus NodeLabel (args: a label no node has)
appended last and no PostFilter: a copy of the pod under that profile, created on the same state
just before the pod, always fails, and its FitError histogram carries the first failing plugin's
reasons of every node (the nodes passing every real filter show NodeLabel's reason). The feasible set
itself is exact: the nodes in the score lines, or the chosen node when only one fits (1.20 skips
scoring then), or none.

Between pods the state is held equal: each pod is followed until bound, or until its preemption
finished (victims deleted at once: every pod has terminationGracePeriodSeconds 0) and it is bound, or
it is deleted when it stays unschedulable, so the next pod sees only bound pods.

The state lists each node's pods in the order kube-scheduler's cache holds them (`NodeOrder`), not in
the API server's name order: preemption collects a node's potential victims in that order, and among
pods of one priority it decides which are reprieved.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policyd.backends.kube.client import ApiError, KubeClient
from policyd.bench.e2e import create_node
from policyd.bench.e2e_report import KUBE_SCHEDULER
from policyd.bench.e2e_schedulers import SchedulerProcess, make_scheduler
from policyd.envtest import LocalControlPlane
from tests.differential.generator import BIND_COMPLETED, CSI_DRIVER, HOSTNAME, NO_PROVISIONER
from tests.differential.scenario import PRIORITY_CLASSES, RUNTIME_CLASS, Obj, Scenario

PROBE_SCHEDULER = "diffharness-probe"
PROBE_LABEL = "diffharness.policyd.io/absent"
# NodeLabel's reason in 1.20 (nodelabel.ErrReasonPresenceViolated): a node passing every real filter
PROBE_REASON = "node(s) didn't have the requested labels"
PROFILES = f"""profiles:
- schedulerName: default-scheduler
- schedulerName: {PROBE_SCHEDULER}
  plugins:
    filter:
      enabled:
      - name: NodeLabel
    postFilter:
      disabled:
      - name: DefaultPreemption
  pluginConfig:
  - name: NodeLabel
    args:
      presentLabels: ["{PROBE_LABEL}"]
"""
WAIT = 20.0
PROBE_TRIES = 20
POLL = 0.02
_ATTEMPT = re.compile(r"Attempting to schedule pod: (\S+)$")
_SCORES = re.compile(r"Plugin (\S+) scores on (\S+) => \[(.*)\]$")
_NODE_SCORE = re.compile(r"\{(\S+) (-?\d+)\}")
_NO_FIT = re.compile(r'"Unable to schedule pod; no fit; waiting" pod="([^"]+)" err="(.*)"$')
# client-go's request log (-v=6 and up): the victims kube-scheduler deleted, one request after another
VICTIM_DELETE = re.compile(r"DELETE https?://\S+/api/v1/namespaces/([^/\s]+)/pods/([^/\s]+) 2\d\d ")


# the scenario's other objects: kind -> (API prefix, resource, namespaced), in creation order
OBJECT_KINDS: dict[str, tuple[str, str, bool]] = {
    "StorageClass": ("/apis/storage.k8s.io/v1", "storageclasses", False),
    "CSINode": ("/apis/storage.k8s.io/v1", "csinodes", False),
    "PersistentVolume": ("/api/v1", "persistentvolumes", False),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "Service": ("/api/v1", "services", True),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
}
SELECTED_NODE = "volume.kubernetes.io/selected-node"


def object_paths(obj: Obj) -> tuple[str, str]:
    """(collection path, object path) of one of a scenario's other objects."""
    prefix, resource, namespaced = OBJECT_KINDS[obj["kind"]]
    meta = obj["metadata"]
    collection = (
        f"{prefix}/namespaces/{meta['namespace']}/{resource}" if namespaced else f"{prefix}/{resource}"
    )
    return collection, f"{collection}/{meta['name']}"


def _creation_order(objects: tuple[Obj, ...]) -> list[Obj]:
    order = list(OBJECT_KINDS)
    return sorted(objects, key=lambda o: order.index(o["kind"]))


class KubeSideError(RuntimeError):
    """The real side could not observe a pod's cycle (a timeout, a process exit)."""


@dataclass
class KubeCycle:
    """What kube-scheduler did with one pod on one state."""

    pod: str
    probe_message: str
    scores: dict[str, dict[str, int]] = field(default_factory=dict)  # plugin -> node -> weighted score
    chosen: str | None = None  # bound by the first cycle
    message: str = ""  # the first cycle's FitError when it found no node
    nominated: str | None = None
    victims: frozenset[str] = frozenset()
    bound_after_preemption: str | None = None

    @property
    def feasible(self) -> frozenset[str]:
        """The nodes that passed every filter in the pod's first cycle."""
        if self.scores:
            return frozenset(next(iter(self.scores.values())))
        return frozenset({self.chosen}) if self.chosen else frozenset()


class NodeOrder:
    """Each node's pods in kube-scheduler's cache order (its NodeInfo.Pods): a pod added or bound goes
    last; a pod removed leaves its place to the node's last pod (NodeInfo.RemovePod's swap-remove)."""

    def __init__(self) -> None:
        self.pods: dict[str, list[str]] = {}  # node -> pod names

    def add(self, node: str, name: str) -> None:
        """A pod was counted against `node`."""
        self.pods.setdefault(node, []).append(name)

    def remove(self, name: str) -> None:
        """A pod was deleted."""
        for names in self.pods.values():
            if name in names:
                at = names.index(name)
                names[at] = names[-1]
                names.pop()
                return

    def sort(self, pods: list[Obj]) -> list[Obj]:
        """`pods` (API objects) ordered node by node as the cache holds them; others after, as given."""
        rank = {name: i for names in self.pods.values() for i, name in enumerate(names)}
        return sorted(pods, key=lambda p: rank.get(p["metadata"]["name"], len(rank)))


class KubeSide:
    """etcd + kube-apiserver + kube-scheduler (v=10, with the probe profile); scenarios one at a time."""

    def __init__(self, assets: Path, workdir: Path) -> None:
        self.assets = assets
        self.workdir = workdir
        self.plane = LocalControlPlane(assets, workdir / "control-plane")
        self.client: KubeClient | None = None
        self.scheduler: SchedulerProcess | None = None
        self.order = NodeOrder()
        self.volumes: list[str] = []  # the scenario's PersistentVolumes (the PV controller's part)
        self.namespace = ""
        self.provisioners: dict[str, str] = {}  # the scenario's classes that provision: name -> provisioner
        self.provisioned: list[str] = []  # the PVs provisioned for its claims (the provisioner's part)

    def start(self) -> None:
        """Start the control plane and kube-scheduler; create the cluster-scoped objects."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.plane.start()
        self.client = KubeClient.connect(kubeconfig=str(self.plane.kubeconfig_path), qps=0, burst=1)
        for pc in PRIORITY_CLASSES:
            body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", **pc}
            self.client.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body=body)
        body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", **RUNTIME_CLASS}
        self.client.request("POST", "/apis/node.k8s.io/v1/runtimeclasses", body=body)
        self.scheduler = make_scheduler(
            KUBE_SCHEDULER,
            assets=self.assets,
            kubeconfig=str(self.plane.kubeconfig_path),
            workdir=self.workdir,
            qps=1000,
            burst=1000,
            policies=(),
            kube_scheduler_extra_config=PROFILES,
            kube_scheduler_extra_args=("-v=10",),
        )
        self.scheduler.start()
        self.scheduler.wait_ready()

    def stop(self) -> None:
        """Stop kube-scheduler and the control plane."""
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.client is not None:
            self.client.close()
        self.plane.stop()

    # -- one scenario ----------------------------------------------------------------------------

    def setup(self, scenario: Scenario) -> None:
        """Create the scenario's namespace, nodes (Ready, with status), bound pods and PDBs."""
        api = self._api()
        ns = scenario.namespace
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        for node in scenario.nodes:
            create_node(api, {k: v for k, v in node.items() if k != "status"}, node.get("status", {}))
        # 1.20 keeps each node's image summary (how many nodes have the image) from when the node was
        # last added or updated (internal/cache/cache.go addNodeImageStates): touch every node once all
        # exist, so ImageLocality's spread factor counts them all, as the current cluster does (README)
        for node in scenario.nodes:
            api.request(
                "PATCH",
                f"/api/v1/nodes/{node['metadata']['name']}",
                body={"metadata": {"annotations": {"diffharness.policyd.io/settled": "true"}}},
                content_type="application/merge-patch+json",
            )
        self.order = NodeOrder()
        for obj in _creation_order(scenario.objects):
            collection, path = object_paths(obj)
            api.request("POST", collection, body={k: v for k, v in obj.items() if k != "status"})
            if obj.get("status"):
                api.request(
                    "PATCH",
                    f"{path}/status",
                    body={"status": obj["status"]},
                    content_type="application/merge-patch+json",
                )
        self.volumes = [o["metadata"]["name"] for o in scenario.objects if o["kind"] == "PersistentVolume"]
        self.namespace = ns
        self.provisioners = {
            o["metadata"]["name"]: o["provisioner"]
            for o in scenario.objects
            if o["kind"] == "StorageClass" and o["provisioner"] != NO_PROVISIONER
        }
        self.provisioned = []
        for pod in scenario.existing:
            api.request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
            self.order.add(pod["spec"]["nodeName"], pod["metadata"]["name"])
        for pdb in scenario.pdbs:
            path = f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets"
            body = {k: v for k, v in pdb.items() if k != "status"}
            api.request("POST", path, body=body)
            api.request(
                "PATCH",
                f"{path}/{pdb['metadata']['name']}/status",
                body={"status": pdb.get("status", {})},
                content_type="application/merge-patch+json",
            )

    def teardown(self, scenario: Scenario) -> None:
        """Delete the scenario's pods, PDBs and nodes (the namespace stays: no controller deletes it)."""
        api = self._api()
        ns = scenario.namespace
        for pod in api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
            self._delete_pod(ns, pod["metadata"]["name"])
        for pdb in scenario.pdbs:
            path = f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/{pdb['metadata']['name']}"
            api.request("DELETE", path)
        for obj in reversed(_creation_order(scenario.objects)):
            try:
                api.request("DELETE", object_paths(obj)[1])
            except ApiError as exc:
                if not exc.not_found:
                    raise
        for name in self.provisioned:
            api.request("DELETE", f"/api/v1/persistentvolumes/{name}")
        for node in scenario.nodes:
            api.request("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
        self.volumes, self.provisioners, self.provisioned = [], {}, []

    def state(self, scenario: Scenario) -> list[Obj]:
        """The scenario's nodes, pods, PDBs and other objects as the API server holds them now."""
        api = self._api()
        ns = scenario.namespace
        names = {n["metadata"]["name"] for n in scenario.nodes}
        nodes = [n for n in api.request("GET", "/api/v1/nodes")["items"] if n["metadata"]["name"] in names]
        pods = self.order.sort(api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"])
        pdbs = api.request("GET", f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets")["items"]
        out: list[Obj] = []
        for kind, api_version, items in (
            ("Node", "v1", nodes),
            ("Pod", "v1", pods),
            ("PodDisruptionBudget", "policy/v1beta1", pdbs),
        ):
            out.extend({"apiVersion": api_version, "kind": kind, **item} for item in items)
        for obj in _creation_order(scenario.objects):
            now = api.request("GET", object_paths(obj)[1])
            out.append({**now, "apiVersion": obj["apiVersion"], "kind": obj["kind"]})
        for name in self.provisioned:
            now = api.request("GET", f"/api/v1/persistentvolumes/{name}")
            out.append({**now, "apiVersion": "v1", "kind": "PersistentVolume"})
        return out

    def schedule(self, scenario: Scenario, pod: Obj) -> tuple[Obj, KubeCycle]:
        """Probe, then schedule `pod` (created now); returns the created object and what happened."""
        api = self._api()
        ns = scenario.namespace
        name = pod["metadata"]["name"]
        probe = _renamed(pod, f"{name}-probe", PROBE_SCHEDULER)
        expected = f"0/{len(scenario.nodes)} nodes are available"
        for _ in range(PROBE_TRIES):
            api.request("POST", f"/api/v1/namespaces/{ns}/pods", body=probe)
            probe_message = self._wait_unschedulable(ns, probe["metadata"]["name"])
            self._delete_pod(ns, probe["metadata"]["name"])
            if probe_message.startswith(expected):
                break
            time.sleep(0.2)  # kube-scheduler's informers have not caught up with the nodes yet
        else:
            raise KubeSideError(f"kube-scheduler does not see the scenario's nodes: {probe_message}")
        before = {p["metadata"]["name"] for p in api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]}
        offset = self._log_size()
        created = api.request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
        cycle = KubeCycle(pod=f"{ns}/{name}", probe_message=probe_message)
        obj = self._wait_first_cycle(ns, name)
        # the log tells the first cycle: a preemption and the bind after it can both happen before
        # the pod is read back
        cycle.scores, failure = self._first_cycle(offset, cycle.pod)
        if failure is None and not obj["spec"].get("nodeName"):
            failure = _unschedulable_message(obj) or ""
        if failure is None:
            cycle.chosen = str(obj["spec"]["nodeName"])
            self.order.add(cycle.chosen, name)
            return created, cycle
        cycle.message = failure
        cycle.nominated = obj.get("status", {}).get("nominatedNodeName") or self._wait_nominated(ns, name)
        if cycle.nominated:
            cycle.bound_after_preemption = self._wait_bound(ns, name)
        after = {p["metadata"]["name"] for p in api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]}
        cycle.victims = frozenset(f"{ns}/{v}" for v in before - after)
        deleted = [v for v in self._deleted(offset, ns) if v in before - after]
        for victim in deleted + sorted(before - after - set(deleted)):
            self.order.remove(victim)
        if cycle.bound_after_preemption is not None:
            self.order.add(cycle.bound_after_preemption, name)
        else:
            self._delete_pod(ns, name)  # stays pending: the next pod must not see it
        return created, cycle

    # -- observing ---------------------------------------------------------------------------------

    def _api(self) -> KubeClient:
        if self.client is None:
            raise KubeSideError("the control plane is not started")
        return self.client

    def _pod(self, ns: str, name: str) -> Obj | None:
        try:
            obj: Obj = self._api().request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return obj

    def _volume_controller_step(self) -> None:
        """The PV controller's part (none runs), on every poll while waiting for kube-scheduler: a PV
        kube-scheduler gave a claim (`spec.claimRef`, in its PreBind) and its claim are marked bound, as
        the controller would, so the bind goes on (else the pod stays assumed in kube-scheduler's cache,
        for up to 1.20's 600 s bind timeout, after the harness deleted it)."""
        if self.provisioners:
            self._provisioner_step()
        if not self.volumes:
            return
        api = self._api()
        mine = set(self.volumes)
        for pv in api.request("GET", "/api/v1/persistentvolumes")["items"]:  # one request per poll
            name = pv["metadata"]["name"]
            ref = pv["spec"].get("claimRef")
            if name not in mine:
                continue
            if not ref or (pv.get("status") or {}).get("phase") == "Bound":
                continue
            path = f"/api/v1/namespaces/{ref['namespace']}/persistentvolumeclaims/{ref['name']}"
            merge = "application/merge-patch+json"
            claim = {"metadata": {"annotations": {BIND_COMPLETED: "yes"}}, "spec": {"volumeName": name}}
            api.request("PATCH", path, body=claim, content_type=merge)
            api.request("PATCH", f"{path}/status", body={"status": {"phase": "Bound"}}, content_type=merge)
            api.request(
                "PATCH",
                f"/api/v1/persistentvolumes/{name}/status",
                body={"status": {"phase": "Bound"}},
                content_type=merge,
            )

    def _provisioner_step(self) -> None:
        """The external provisioner's part (none runs): a claim of a provisioning class that
        kube-scheduler's PreBind gave a node (the selected-node annotation) gets a PV on that node,
        bound to it, as a provisioner and the PV controller would leave them."""
        api = self._api()
        path = f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims"
        for claim in api.request("GET", path)["items"]:  # one request per poll
            meta, spec = claim["metadata"], claim["spec"]
            node = (meta.get("annotations") or {}).get(SELECTED_NODE)
            provisioner = self.provisioners.get(spec.get("storageClassName") or "")
            if not node or not provisioner or spec.get("volumeName"):
                continue
            name = f"{self.namespace}-{meta['name']}"
            capacity = {"storage": spec["resources"]["requests"]["storage"]}
            source: Obj = {"csi": {"driver": provisioner, "volumeHandle": name}}
            if provisioner != CSI_DRIVER:
                source = {"nfs": {"server": "nfs.example.com", "path": f"/{name}"}}
            pv: Obj = {
                "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": provisioner}},
                "spec": {
                    **source,
                    "capacity": capacity,
                    "accessModes": spec["accessModes"],
                    "storageClassName": spec["storageClassName"],
                    "persistentVolumeReclaimPolicy": "Delete",
                    "claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "namespace": self.namespace,
                        "name": meta["name"],
                        "uid": meta["uid"],
                    },
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
                            ]
                        }
                    },
                },
            }
            api.request("POST", "/api/v1/persistentvolumes", body=pv)
            self.provisioned.append(name)
            merge = "application/merge-patch+json"
            api.request(
                "PATCH",
                f"/api/v1/persistentvolumes/{name}/status",
                body={"status": {"phase": "Bound"}},
                content_type=merge,
            )
            bound = {"metadata": {"annotations": {BIND_COMPLETED: "yes"}}, "spec": {"volumeName": name}}
            api.request("PATCH", f"{path}/{meta['name']}", body=bound, content_type=merge)
            status = {"status": {"phase": "Bound", "accessModes": spec["accessModes"], "capacity": capacity}}
            api.request("PATCH", f"{path}/{meta['name']}/status", body=status, content_type=merge)

    def _until(self, what: str, probe: Any, timeout: float = WAIT) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._volume_controller_step()
            value = probe()
            if value is not None:
                return value
            if self.scheduler is not None:
                self.scheduler.check_alive()
            time.sleep(POLL)
        raise KubeSideError(f"timed out waiting for {what}")

    def _wait_unschedulable(self, ns: str, name: str) -> str:
        def probe() -> str | None:
            obj = self._pod(ns, name)
            return _unschedulable_message(obj) if obj is not None else None

        message: str = self._until(f"{ns}/{name} to be found unschedulable", probe)
        return message

    def _wait_first_cycle(self, ns: str, name: str) -> Obj:
        def probe() -> Obj | None:
            obj = self._pod(ns, name)
            if obj is None:
                return None
            if obj["spec"].get("nodeName") or _unschedulable_message(obj) is not None:
                return obj
            return None

        obj: Obj = self._until(f"{ns}/{name}'s first scheduling cycle", probe)
        return obj

    def _wait_nominated(self, ns: str, name: str) -> str | None:
        # the nomination is written right after the FitError condition, in the same cycle
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            self._volume_controller_step()
            obj = self._pod(ns, name)
            if obj is None:
                return None
            nominated = obj.get("status", {}).get("nominatedNodeName")
            if nominated or obj["spec"].get("nodeName"):
                return str(nominated) if nominated else None
            time.sleep(POLL)
        return None

    def _wait_bound(self, ns: str, name: str) -> str | None:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            self._volume_controller_step()
            obj = self._pod(ns, name)
            if obj is not None and obj["spec"].get("nodeName"):
                return str(obj["spec"]["nodeName"])
            time.sleep(POLL)
        return None

    def _delete_pod(self, ns: str, name: str) -> None:
        try:
            self._api().request(
                "DELETE",
                f"/api/v1/namespaces/{ns}/pods/{name}",
                body={"gracePeriodSeconds": 0},
            )
        except ApiError as exc:
            if not exc.not_found:
                raise

        def gone() -> bool | None:
            return True if self._pod(ns, name) is None else None

        self._until(f"{ns}/{name} to be deleted", gone)

    def _log_size(self) -> int:
        assert self.scheduler is not None
        try:
            return self.scheduler.log_path.stat().st_size
        except OSError:
            return 0

    def _log_since(self, offset: int) -> str:
        assert self.scheduler is not None
        with open(self.scheduler.log_path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", "replace")

    def _deleted(self, offset: int, namespace: str) -> list[str]:
        """The pods of `namespace` kube-scheduler deleted after `offset` in the log, in its order."""
        found = (VICTIM_DELETE.search(line) for line in self._log_since(offset).splitlines())
        return [m.group(2) for m in found if m is not None and m.group(1) == namespace]

    def _first_cycle(self, offset: int, key: str) -> tuple[dict[str, dict[str, int]], str | None]:
        """`key`'s first cycle after `offset` in the log: weighted scores (plugin -> node -> score) and
        the FitError text when it found no node."""
        text = self._log_since(offset)
        scores: dict[str, dict[str, int]] = {}
        failure: str | None = None
        inside = False
        for line in text.splitlines():
            attempt = _ATTEMPT.search(line)
            if attempt:
                if inside:
                    break
                inside = attempt.group(1) == key
                continue
            if not inside:
                continue
            match = _SCORES.search(line)
            if match and match.group(2) == key:
                scores[match.group(1)] = {n: int(s) for n, s in _NODE_SCORE.findall(match.group(3))}
            no_fit = _NO_FIT.search(line)
            if no_fit and no_fit.group(1) == key:
                failure = no_fit.group(2)
        return scores, failure


def _renamed(pod: Obj, name: str, scheduler: str) -> Obj:
    meta = dict(pod["metadata"], name=name)
    spec = dict(pod["spec"], schedulerName=scheduler)
    return {**pod, "metadata": meta, "spec": spec}


def _unschedulable_message(obj: Obj) -> str | None:
    for condition in obj.get("status", {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message", ""))
    return None
