"""NodeVolumeLimits (framework/plugins/nodevolumelimits): how many volumes a node can attach per driver.

A pod's attachable volumes are its claims' PVs and its inline volumes of an attachable kind, each with a
unique name and the limit it counts against on a node:
- a CSI PV counts against its driver, with the limit of the node's CSINode (`spec.drivers[].allocatable.count`),
  else the node's allocatable `attachable-volumes-csi-<driver>`;
- an in-tree AWS EBS / GCE PD / Azure Disk / Cinder volume counts against the plugin's CSI driver when
  the node's CSINode lists the plugin in `storage.alpha.kubernetes.io/migrated-plugins` (CSI migration),
  else against the in-tree limit: the node's allocatable `attachable-volumes-<plugin>`, else the default
  (EBS 39, or 25 on Nitro instance types; GCE PD 16; Azure Disk 16; Cinder 256);
- an unbound claim counts against its StorageClass's provisioner (translated likewise), named by
  `<namespace>-<claim>`.
A volume already attached to the node (used by a pod there) is not counted again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from policyd.scheduler.cluster.volume_claims import CelObject, claim_class, claim_uses, pod_volumes
from policyd.scheduler.cluster.volume_store import KubeObject, VolumeStore

REASON_MAX_VOLUME_COUNT = "node(s) exceed max volume count"
ANN_MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"
NO_LIMIT = -1
_NITRO = re.compile(r"^[cmr]5.*|t3|z1d")
_INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")


@dataclass(frozen=True)
class InTreePlugin:
    """An in-tree attachable volume plugin: its volume field, id field, CSI driver, limit key, default."""

    name: str
    field: str
    id_field: str
    csi_driver: str
    limit_key: str
    default_limit: int


IN_TREE = (
    InTreePlugin(
        "kubernetes.io/aws-ebs",
        "awsElasticBlockStore",
        "volumeID",
        "ebs.csi.aws.com",
        "attachable-volumes-aws-ebs",
        39,
    ),
    InTreePlugin(
        "kubernetes.io/gce-pd",
        "gcePersistentDisk",
        "pdName",
        "pd.csi.storage.gke.io",
        "attachable-volumes-gce-pd",
        16,
    ),
    InTreePlugin(
        "kubernetes.io/azure-disk",
        "azureDisk",
        "diskName",
        "disk.csi.azure.com",
        "attachable-volumes-azure-disk",
        16,
    ),
    InTreePlugin(
        "kubernetes.io/cinder",
        "cinder",
        "volumeID",
        "cinder.csi.openstack.org",
        "attachable-volumes-cinder",
        256,
    ),
)
_BY_NAME = {p.name: p for p in IN_TREE}
_EBS_NITRO_LIMIT = 25


@dataclass(frozen=True)
class Attachable:
    """One attachable volume: its driver (CSI driver or in-tree plugin name) and its unique handle."""

    driver: str
    handle: str


def _in_tree(spec: Mapping[str, Any]) -> Attachable | None:
    for plugin in IN_TREE:
        source = spec.get(plugin.field)
        if source is not None:
            return Attachable(plugin.name, str(source.get(plugin.id_field, "")))
    return None


def _of_claim(claim: KubeObject, store: VolumeStore) -> Attachable | None:
    meta, spec = claim.get("metadata") or {}, claim.get("spec") or {}
    pv = store.volume(str(spec.get("volumeName") or "")) if spec.get("volumeName") else None
    if pv is not None:
        pv_spec = pv.get("spec") or {}
        csi = pv_spec.get("csi")
        if csi is not None:
            return Attachable(str(csi.get("driver", "")), str(csi.get("volumeHandle", "")))
        return _in_tree(pv_spec)
    sc = store.storage_class(claim_class(claim))
    if sc is None or not sc.get("provisioner"):
        return None
    return Attachable(str(sc["provisioner"]), f"{meta.get('namespace') or 'default'}-{meta.get('name', '')}")


def attachable_volumes(pod: CelObject, store: VolumeStore) -> list[Attachable]:
    """The pod's attachable volumes (claims that do not exist are skipped)."""
    out: list[Attachable] = []
    ns = str(pod.get("namespace") or "default")
    for use in claim_uses(pod):
        claim = store.claim(ns, use.name)
        found = _of_claim(claim, store) if claim is not None else None
        if found is not None and found.driver:
            out.append(found)
    for vol in pod_volumes(pod):
        inline = _in_tree(vol)
        if inline is not None:
            out.append(inline)
    return out


def pod_drivers(pod: CelObject, store: VolumeStore) -> list[str]:
    """Drivers (CSI names or in-tree plugin names) of the pod's attachable volumes, sorted."""
    return sorted({a.driver for a in attachable_volumes(pod, store)})


def _migrated(plugin: str, csi_node: KubeObject | None) -> bool:
    if csi_node is None:
        return False
    annotations = (csi_node.get("metadata") or {}).get("annotations") or {}
    return plugin in str(annotations.get(ANN_MIGRATED_PLUGINS, "")).split(",")


def limit_key(driver: str, csi_node: KubeObject | None) -> str:
    """The limit a volume of `driver` counts against on a node (CSI driver name or in-tree key)."""
    plugin = _BY_NAME.get(driver)
    if plugin is None:
        return driver
    return plugin.csi_driver if _migrated(plugin.name, csi_node) else plugin.limit_key


def _limit(key: str, node: CelObject, csi_node: KubeObject | None) -> int:
    in_tree = next((p for p in IN_TREE if p.limit_key == key), None)
    if in_tree is not None:
        allocatable = node.get("allocatable") or {}
        if key in allocatable:
            return int(allocatable[key])
        if in_tree.name == "kubernetes.io/aws-ebs":
            labels = node.get("labels") or {}
            instance = next((labels[k] for k in _INSTANCE_TYPE_LABELS if k in labels), "")
            if instance and _NITRO.search(instance):
                return _EBS_NITRO_LIMIT
        return in_tree.default_limit
    for driver in ((csi_node or {}).get("spec") or {}).get("drivers") or ():
        count = (driver.get("allocatable") or {}).get("count")
        if driver.get("name") == key and count is not None:
            return int(count)
    allocatable = node.get("allocatable") or {}
    return int(allocatable.get(f"attachable-volumes-csi-{key}", NO_LIMIT))


def volume_limit(
    pod: CelObject, node: CelObject, node_pods: Iterable[CelObject], store: VolumeStore, driver: str
) -> dict[str, Any]:
    """`{key, limit, attached, requested}`: the limit `driver`'s volumes count against on the node,
    the unique volumes attached there for it, and the pod's new ones (limit -1: none)."""
    csi_node = store.csi_node(str(node.get("name", "")))
    key = limit_key(driver, csi_node)

    def handles(p: CelObject) -> set[str]:
        return {
            f"{limit_key(a.driver, csi_node)}/{a.handle}"
            for a in attachable_volumes(p, store)
            if limit_key(a.driver, csi_node) == key
        }

    attached: set[str] = set()
    for other in node_pods:
        attached |= handles(other)
    new = handles(pod) - attached
    return {
        "key": key,
        "limit": _limit(key, node, csi_node),
        "attached": len(attached),
        "requested": len(new),
    }
