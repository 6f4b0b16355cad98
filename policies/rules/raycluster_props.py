"""What a RayCluster's props say (KubeRay `ray.io/v1`, as in domain/resources/kuberay.py), read
once for every rule that looks at one: its pod templates and their containers, how many slices a
TPU worker group gives a job, the buckets it reads data from and where it keeps the compilation
cache. No rule is declared here: the rules on the cluster are in `raycluster`, `ray_head` and
`raycluster_pools`, and `storage` and `stack` read clusters through this module too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pulumi_policy import ResourceValidationArgs

from domain.compile_cache import COMPILE_CACHE_ENV
from domain.resources.kuberay import DATASET_MOUNT, GCS_FUSE_DRIVER
from policies.rules.common import RAY_CLUSTER, UNKNOWN, at, described, known, plain, whole_number


def ray_cluster(args: ResourceValidationArgs) -> tuple[dict[str, Any], str] | None:
    """A RayCluster's plain props and its name for messages (what `on` hands a rule), None for any
    other resource."""
    if args.resource_type != RAY_CLUSTER:
        return None
    props = plain(args.props)
    return props, described("RayCluster", args.name, props)


def pod_specs(props: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(`the head` / `worker group 'x'`, pod spec) for every pod template of the cluster."""
    head = at(props, "spec", "headGroupSpec", "template", "spec")
    if isinstance(head, dict):
        yield "the head", head
    groups = at(props, "spec", "workerGroupSpecs")
    for index, group in enumerate(groups if isinstance(groups, list) else []):
        spec = at(group, "template", "spec")
        if isinstance(spec, dict):
            name = at(group, "groupName")
            yield f"worker group '{name if isinstance(name, str) else index}'", spec


def pod_containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers"):
        found = at(pod_spec, key)
        yield from (c for c in (found if isinstance(found, list) else []) if isinstance(c, dict))


def container_name(container: dict[str, Any]) -> str:
    name = at(container, "name")
    return f"container '{name}'" if isinstance(name, str) else "a container"


def every_container(props: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(`container 'x' of the head` / `... of worker group 'y'`, container) for every container
    of every pod template of the cluster."""
    for where, pod_spec in pod_specs(props):
        for container in pod_containers(pod_spec):
            yield f"{container_name(container)} of {where}", container


# The head's environment variable that turns Ray autoscaler v2 on without autoscalerOptions.version
# (KubeRay before 1.4; v1.7.0 still honours it and sets it itself for version v2).
AUTOSCALER_V2_ENV = "RAY_enable_autoscaler_v2"


def _decided(spec: Any, key: str, absent: Any) -> Any:
    """spec[key], or `absent` (what KubeRay reads) when the key is not there; UNKNOWN when the
    spec itself is not known yet."""
    if not isinstance(spec, dict):
        return UNKNOWN
    return spec[key] if key in spec else absent


def in_tree_autoscaling(cluster_spec: Any) -> Any:
    """Whether KubeRay runs its autoscaler for the cluster (an absent flag is off), or UNKNOWN."""
    enabled = _decided(cluster_spec, "enableInTreeAutoscaling", False)
    return enabled if isinstance(enabled, bool) else UNKNOWN


def autoscaler_version(cluster_spec: dict[str, Any]) -> Any:
    """The Ray autoscaler KubeRay runs: autoscalerOptions.version, else v2 when the head sets
    RAY_enable_autoscaler_v2 to 1 or true (as KubeRay v1.7.0 reads it), else v1; UNKNOWN in preview."""
    options = _decided(cluster_spec, "autoscalerOptions", {})
    version = _decided(options, "version", None)
    if version is not None:
        return version if isinstance(version, str) else UNKNOWN
    env = _decided(at(cluster_spec, "headGroupSpec", "template", "spec", "containers", 0), "env", [])
    if not isinstance(env, list):
        return UNKNOWN
    for variable in env:
        if isinstance(variable, dict) and at(variable, "name") == AUTOSCALER_V2_ENV:
            value = at(variable, "value")
            if not known(value):
                return UNKNOWN
            return "v2" if value in ("1", "true") else "v1"
    return "v1"


def slices_for_a_job(cluster_spec: Any, group_spec: Any) -> tuple[Any, str]:
    """How many slices (replicas) a TPU worker group gives a job, and the field that says it: with
    the in-tree autoscaler, maxReplicas (it brings them up on demand); without, replicas as KubeRay
    keeps it, within minReplicas and maxReplicas (utils.GetWorkerGroupDesiredReplicas). UNKNOWN
    when that cannot be told yet."""
    autoscaling = in_tree_autoscaling(cluster_spec)
    if autoscaling is UNKNOWN:
        return UNKNOWN, "replicas"
    most = whole_number(at(group_spec, "maxReplicas"))
    if autoscaling:
        return most, "maxReplicas"
    replicas = whole_number(at(group_spec, "replicas"))
    least = whole_number(at(group_spec, "minReplicas"))
    if not known(replicas):
        return UNKNOWN, "replicas"
    if known(least) and replicas < least:
        return least, "minReplicas"
    if known(most) and replicas > most:
        return most, "maxReplicas"
    return replicas, "replicas"


def dataset_buckets(props: dict[str, Any]) -> set[str]:
    """The buckets a RayCluster reads training data from: those of its Cloud Storage FUSE volumes
    mounted at the dataset root or mounted read-only (names known so far)."""
    found = set()
    for _, pod_spec in pod_specs(props):
        volumes = at(pod_spec, "volumes")
        at_root = {
            at(mount, "name")
            for container in pod_containers(pod_spec)
            for mount in (at(container, "volumeMounts") if isinstance(at(container, "volumeMounts"), list) else [])
            if at(mount, "mountPath") == DATASET_MOUNT
        }
        for volume in volumes if isinstance(volumes, list) else []:
            csi = at(volume, "csi")
            if not isinstance(csi, dict) or at(csi, "driver") != GCS_FUSE_DRIVER:
                continue
            bucket = at(csi, "volumeAttributes", "bucketName")
            if isinstance(bucket, str) and (at(csi, "readOnly") is True or at(volume, "name") in at_root):
                found.add(bucket)
    return found


@dataclass(frozen=True)
class CompileCache:
    """Where a RayCluster's containers keep the compilation cache (its `gs://` URL in
    COMPILE_CACHE_ENV, as the infra stack sets it), and who they run as: `namespace` and
    `service_account` may be UNKNOWN."""

    where: str  # `container 'x' of worker group 'y'`
    bucket: str
    url: str
    namespace: Any
    service_account: Any

    @property
    def writer_suffix(self) -> str | None:
        """How the Workload Identity principal of the pods' service account ends, None if unknown."""
        if not (isinstance(self.namespace, str) and isinstance(self.service_account, str)):
            return None
        return f"/subject/ns/{self.namespace}/sa/{self.service_account}"


def compile_caches(props: dict[str, Any]) -> list[CompileCache]:
    """Every container's compilation cache whose `gs://` URL is known so far."""
    found = []
    namespace = at(props, "metadata", "namespace")
    for where, pod_spec in pod_specs(props):
        account = at(pod_spec, "serviceAccountName")
        for container in pod_containers(pod_spec):
            env = at(container, "env")
            for variable in env if isinstance(env, list) else []:
                url = at(variable, "value")
                if at(variable, "name") != COMPILE_CACHE_ENV or not isinstance(url, str) or not url.startswith("gs://"):
                    continue
                bucket = url.removeprefix("gs://").split("/", 1)[0]
                if bucket:
                    found.append(
                        CompileCache(f"{container_name(container)} of {where}", bucket, url, namespace, account)
                    )
    return found
