"""The RayCluster (KubeRay `ray.io/v1`, props as in domain/ray/kuberay.py) and anything exposing its
head.

A worker group is a TPU worker group when its pods select a TPU accelerator
(`cloud.google.com/gke-tpu-accelerator`). Its shape must be the slices' shape: one replica per
slice, one host per VM, the VM's chips per host. A group that scales (minReplicas < maxReplicas)
needs KubeRay's in-tree autoscaler with Ray autoscaler v2, and then maxReplicas is the number of
slices a job gets. A mismatch leaves pods pending or JAX waiting
for peers that never come, on TPU nodes billed by the hour. The head runs the Jobs API, which
executes any command it is sent: it must never be reachable from outside the cluster, and inside
it only with Ray's auth token.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    StackValidationArgs,
)

from domain.compile_cache import COMPILE_CACHE_ENV
from domain.ray.kuberay import (
    AUTOSCALER_VERSION,
    DATASET_MOUNT,
    GCS_FUSE_DRIVER,
    MIN_RAY_VERSION_FOR_TOKEN_AUTH,
)
from domain.tpu.gke_labels import FLEX_START_LABEL, SPOT_LABEL, TPU_ACCELERATOR_LABEL, TPU_TOPOLOGY_LABEL
from domain.tpu.tpu_catalog import ACCELERATORS
from policies.rules.common import (
    K8S_SERVICE,
    RAY_CLUSTER,
    UNKNOWN,
    StackView,
    TpuWorkerGroup,
    at,
    container_tpu_limit,
    described,
    known,
    on,
    plain,
    requests_tpu,
    tpu_worker_groups,
    whole_number,
)
from policies.rules.declare import Rules

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()

PUBLIC_SERVICE_TYPES = ("LoadBalancer", "NodePort")
MOVING_TAGS = ("latest", "nightly")


def _ray_cluster(args: ResourceValidationArgs) -> tuple[dict[str, Any], str] | None:
    if args.resource_type != RAY_CLUSTER:
        return None
    props = plain(args.props)
    return props, described("RayCluster", args.name, props)


def _pod_specs(props: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
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


def _containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers"):
        found = at(pod_spec, key)
        yield from (c for c in (found if isinstance(found, list) else []) if isinstance(c, dict))


def _container_name(container: dict[str, Any]) -> str:
    name = at(container, "name")
    return f"container '{name}'" if isinstance(name, str) else "a container"


def _every_container(props: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(`container 'x' of the head` / `... of worker group 'y'`, container) for every container
    of every pod template of the cluster."""
    for where, pod_spec in _pod_specs(props):
        for container in _containers(pod_spec):
            yield f"{_container_name(container)} of {where}", container


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


def _autoscaler_version(cluster_spec: dict[str, Any]) -> Any:
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


@RULES.resource(
    "raycluster-hosts-per-slice",
    EnforcementLevel.MANDATORY,
    "TPU worker groups have one host per VM of the selected topology.",
)
@on(_ray_cluster)
def hosts_per_slice(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """One Ray worker per TPU VM: numOfHosts is the VM count of the selected topology."""
    for group in tpu_worker_groups(props):
        hosts = whole_number(at(group.spec, "numOfHosts"))
        accelerator, shape = group.accelerator, group.shape
        if accelerator is None or shape is None or not known(hosts) or hosts == shape.vms:
            continue
        effect = "pods wait for VMs that do not exist" if hosts > shape.vms else "VMs sit idle"
        report_violation(
            f"{label}: worker group '{group.name}' has numOfHosts {hosts}, but a "
            f"{group.topology} slice of TPU {accelerator.name} has {shape.vms} VMs, "
            f"so {effect} while the slice is billed. Set numOfHosts to {shape.vms}.",
            args.urn,
        )


@RULES.resource(
    "raycluster-chips-per-host",
    EnforcementLevel.MANDATORY,
    "TPU workers ask for exactly the chips of one VM.",
)
@on(_ray_cluster)
def chips_per_host(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Each TPU worker takes all chips of its VM, no more (unschedulable), no fewer (idle)."""
    for group in tpu_worker_groups(props):
        accelerator, shape = group.accelerator, group.shape
        if accelerator is None or shape is None:
            continue
        for container in group.containers:
            chips = container_tpu_limit(container)
            if known(chips) and chips != shape.chips_per_vm:
                report_violation(
                    f"{label}: {_container_name(container)} of worker group '{group.name}' asks "
                    f"for {chips} TPU chips, but a {group.topology} VM of TPU "
                    f"{accelerator.name} has {shape.chips_per_vm}. Set its "
                    f'google.com/tpu limit and request to "{shape.chips_per_vm}".',
                    args.urn,
                )


@RULES.resource(
    "raycluster-megascale-slices",
    EnforcementLevel.MANDATORY,
    "MEGASCALE_NUM_SLICES equals the slices the TPU worker group gives a job (replicas, or maxReplicas when autoscaled).",
)
@on(_ray_cluster)
def megascale_slices(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """JAX multi-slice waits for MEGASCALE_NUM_SLICES slices; KubeRay starts `replicas` of them, or
    the autoscaler up to `maxReplicas`."""
    for group in tpu_worker_groups(props):
        replicas, source = slices_for_a_job(at(props, "spec"), group.spec)
        if not known(replicas):
            continue
        gives = f"scales to at most {replicas} slices" if source == "maxReplicas" else f"starts {replicas} slices"
        for container in group.containers:
            env = at(container, "env")
            for variable in env if isinstance(env, list) else []:
                if not isinstance(variable, dict) or at(variable, "name") != "MEGASCALE_NUM_SLICES":
                    continue
                slices = whole_number(at(variable, "value"))
                if known(slices) and slices != replicas:
                    report_violation(
                        f"{label}: worker group '{group.name}' {gives} ({source}) but sets "
                        f"MEGASCALE_NUM_SLICES={slices}: JAX would wait for slices that never "
                        f'come, or leave some out. Set MEGASCALE_NUM_SLICES to "{replicas}".',
                        args.urn,
                    )


@RULES.resource(
    "raycluster-autoscaler-v2",
    EnforcementLevel.MANDATORY,
    "A TPU worker group that scales (minReplicas < maxReplicas) has KubeRay's in-tree autoscaler with Ray autoscaler v2.",
)
@on(_ray_cluster)
def autoscaler_for_scaling_groups(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """A TPU group that may scale (minReplicas < maxReplicas) only scales with KubeRay's in-tree
    autoscaler, and only Ray autoscaler v2 reads the label selectors of Ray's TPU slice placement
    groups (ray.util.tpu): under v1, or with no autoscaler, a job's slices never come up."""
    spec = at(props, "spec")
    for group in tpu_worker_groups(props):
        least = whole_number(at(group.spec, "minReplicas"))
        most = whole_number(at(group.spec, "maxReplicas"))
        if not known(least, most) or least >= most:
            continue
        autoscaling = in_tree_autoscaling(spec)
        if autoscaling is UNKNOWN:
            continue
        if not autoscaling:
            report_violation(
                f"{label}: worker group '{group.name}' may run {least} to {most} slices, but "
                "spec.enableInTreeAutoscaling is not true, so nothing scales it: KubeRay keeps its "
                "replicas, and a job waits for slices that never come. Set "
                f'spec.enableInTreeAutoscaling to true with spec.autoscalerOptions.version "{AUTOSCALER_VERSION}", '
                "or give the group a fixed size (minReplicas = maxReplicas = replicas).",
                args.urn,
            )
            continue
        version = _autoscaler_version(spec)
        if known(version) and version != AUTOSCALER_VERSION:
            report_violation(
                f"{label}: worker group '{group.name}' is scaled by Ray autoscaler {version}, which "
                "ignores the label selectors of Ray's TPU slice placement groups, so it never brings "
                "a slice up for a Ray Train job. Set spec.autoscalerOptions.version to "
                f'"{AUTOSCALER_VERSION}".',
                args.urn,
            )


def _image_problem(image: str) -> str | None:
    if "@" in image:  # a digest pins the image exactly
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag, so it means `latest`"
    tag = last.rsplit(":", 1)[1]
    if any(moving in tag for moving in MOVING_TAGS):
        return f"uses the moving tag {tag!r}"
    return None


@RULES.resource(
    "raycluster-images-pinned",
    EnforcementLevel.MANDATORY,
    "Ray containers run pinned images (a version tag or a digest, never latest or nightly).",
)
@on(_ray_cluster)
def images_pinned(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """A moving tag can give hosts of one slice different Ray or JAX builds, and a rerun a
    different program than the one that was tested."""
    for named, container in _every_container(props):
        image = at(container, "image")
        problem = _image_problem(image) if isinstance(image, str) else None
        if problem:
            report_violation(
                f"{label}: {named} runs image {image!r}, which {problem}. Pin a version tag or an "
                "@sha256 digest (or leave rayImage unset so the stack builds its own, content-tagged image).",
                args.urn,
            )


@RULES.resource(
    "raycluster-privileged-only-for-tpu",
    EnforcementLevel.ADVISORY,
    "Only containers that use TPU chips run privileged.",
)
@on(_ray_cluster)
def privileged_only_for_tpu(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Privileged is needed for TPU device access on Standard pools, and nowhere else."""
    for named, container in _every_container(props):
        privileged = at(container, "securityContext", "privileged") is True
        if privileged and requests_tpu(container) is False:
            report_violation(
                f"{label}: {named} runs privileged but uses no TPU chips, so it gets full access "
                "to its node for nothing. Remove securityContext.privileged from it.",
                args.urn,
            )


def _unbounded_file_cache(attributes: Any) -> str | None:
    """How a Cloud Storage FUSE volume's attributes ask for a file cache without bound, if they do:
    `file-cache:max-size-mb:-1` in its mount options, or fileCacheCapacity "-1" (GKE's volume
    attributes reference: the cache volume's entire capacity)."""
    if not isinstance(attributes, dict):
        return None
    options = attributes.get("mountOptions")
    for option in options.split(",") if isinstance(options, str) else []:
        key, _, size = option.strip().replace("=", ":").rpartition(":")
        if key == "file-cache:max-size-mb" and size.strip() == "-1":
            return f"mount option {option.strip()!r}"
    if str(attributes.get("fileCacheCapacity", "")).strip() == "-1":
        return 'fileCacheCapacity "-1"'
    return None


@RULES.resource(
    "raycluster-fuse-file-cache-bounded",
    EnforcementLevel.MANDATORY,
    "Every Cloud Storage FUSE volume's file cache is bounded (never file-cache:max-size-mb:-1).",
)
@on(_ray_cluster)
def fuse_file_cache_bounded(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """An unbounded Cloud Storage FUSE file cache fills its cache volume, by default the node's
    boot disk, with everything read through the mount: a whole checkpoint on a restore."""
    for where, pod_spec in _pod_specs(props):
        volumes = at(pod_spec, "volumes")
        for volume in volumes if isinstance(volumes, list) else []:
            if not isinstance(volume, dict) or at(volume, "csi", "driver") != GCS_FUSE_DRIVER:
                continue
            unbounded = _unbounded_file_cache(at(volume, "csi", "volumeAttributes"))
            if unbounded:
                report_violation(
                    f"{label}: Cloud Storage FUSE volume {at(volume, 'name')!r} of {where} has an unbounded "
                    f"file cache ({unbounded}), which fills the node's boot disk (its default cache volume) with "
                    "everything read, a whole checkpoint on a restore. Bound it (file-cache:max-size-mb:N, on a "
                    "cache volume sized for it) or leave the file cache off.",
                    args.urn,
                )


def _writable(node: dict[str, Any]) -> Any:
    """Whether a volume source or a volume mount lets the pod write: Kubernetes reads an absent
    readOnly as false (read-write), so its absence is decided; UNKNOWN while not known yet."""
    read_only = node.get("readOnly", False)
    if not known(read_only):
        return UNKNOWN
    return read_only is not True


def dataset_buckets(props: dict[str, Any]) -> set[str]:
    """The buckets a RayCluster reads training data from: those of its Cloud Storage FUSE volumes
    mounted at the dataset root or mounted read-only (names known so far)."""
    found = set()
    for _, pod_spec in _pod_specs(props):
        volumes = at(pod_spec, "volumes")
        at_root = {
            at(mount, "name")
            for container in _containers(pod_spec)
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
    for where, pod_spec in _pod_specs(props):
        account = at(pod_spec, "serviceAccountName")
        for container in _containers(pod_spec):
            env = at(container, "env")
            for variable in env if isinstance(env, list) else []:
                url = at(variable, "value")
                if at(variable, "name") != COMPILE_CACHE_ENV or not isinstance(url, str) or not url.startswith("gs://"):
                    continue
                bucket = url.removeprefix("gs://").split("/", 1)[0]
                if bucket:
                    found.append(
                        CompileCache(f"{_container_name(container)} of {where}", bucket, url, namespace, account)
                    )
    return found


@RULES.resource(
    "raycluster-dataset-mount-read-only",
    EnforcementLevel.MANDATORY,
    f"A Cloud Storage FUSE volume mounted at the dataset root ({DATASET_MOUNT}) is read-only (its CSI volume and every mount).",
)
@on(_ray_cluster)
def dataset_mount_read_only(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """The training data is only read: a Cloud Storage FUSE volume mounted at the dataset root
    must be read-only, both the CSI volume (the driver then mounts the bucket read-only) and every
    container's mount of it, so no job can change or delete the data another run trains on."""
    for where, pod_spec in _pod_specs(props):
        volumes = at(pod_spec, "volumes")
        by_name = {
            volume.get("name"): volume
            for volume in (volumes if isinstance(volumes, list) else [])
            if isinstance(volume, dict) and isinstance(volume.get("name"), str)
        }
        for container in _containers(pod_spec):
            mounts = at(container, "volumeMounts")
            for mount in mounts if isinstance(mounts, list) else []:
                if not isinstance(mount, dict) or at(mount, "mountPath") != DATASET_MOUNT:
                    continue
                volume = by_name.get(at(mount, "name"))
                csi = at(volume, "csi")
                if not isinstance(csi, dict) or at(csi, "driver") != GCS_FUSE_DRIVER:
                    continue
                writable = [
                    what
                    for what, node in (("the CSI volume", csi), (f"{_container_name(container)}'s mount", mount))
                    if _writable(node) is True
                ]
                if writable:
                    report_violation(
                        f"{label}: Cloud Storage FUSE volume {at(volume, 'name')!r} of {where}, mounted at the dataset "
                        f"root {DATASET_MOUNT}, is writable ({' and '.join(writable)} without readOnly: true), so a job "
                        "could change or delete the training data. Set readOnly: true on the volume's csi and on "
                        "every volumeMount of it.",
                        args.urn,
                    )


def _requires_label(pod_spec: dict[str, Any], label: str) -> bool:
    """Whether the pod can only run on nodes labelled `label`=true."""
    if at(pod_spec, "nodeSelector", label) == "true":
        return True
    terms = at(
        pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"
    )
    for term in terms if isinstance(terms, list) else []:
        expressions = at(term, "matchExpressions")
        for expression in expressions if isinstance(expressions, list) else []:
            values = at(expression, "values")
            if (
                at(expression, "key") == label
                and at(expression, "operator") == "In"
                and isinstance(values, list)
                and "true" in values
            ):
                return True
    return False


# Capacity the head must not run on, and what happens to the job there.
_HEAD_REFUSED_CAPACITY = {
    SPOT_LABEL: ("Spot nodes", "a preemption ends the whole job"),
    FLEX_START_LABEL: ("flex-start nodes", "the node ends after its maximum run duration, and the job with it"),
}


@RULES.resource(
    "raycluster-head-not-on-spot",
    EnforcementLevel.MANDATORY,
    "The Ray head is never scheduled on Spot or flex-start nodes.",
)
@on(_ray_cluster)
def head_not_on_spot(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """A preempted head (or one on a flex-start node at its end) ends the job and every worker's
    progress since the last checkpoint."""
    head = at(props, "spec", "headGroupSpec", "template", "spec")
    if not isinstance(head, dict):
        return
    for node_label, (nodes, effect) in _HEAD_REFUSED_CAPACITY.items():
        if _requires_label(head, node_label):
            report_violation(
                f"{label} schedules its head on {nodes} ({node_label}=true): {effect} while the "
                "TPU slices keep billing. Remove that node selector from the head and keep it on "
                "the on-demand CPU pool.",
                args.urn,
            )


@RULES.resource(
    "raycluster-head-service-cluster-ip",
    EnforcementLevel.MANDATORY,
    "The Ray head service is ClusterIP only.",
)
@on(_ray_cluster)
def head_service_cluster_ip(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """The head's service carries the dashboard and the Jobs API (remote code execution)."""
    head = at(props, "spec", "headGroupSpec")
    for path in (("serviceType",), ("headService", "spec", "type")):
        service_type = at(head, *path)
        if known(service_type) and service_type != "ClusterIP":
            report_violation(
                f"{label} exposes its head service as {service_type} "
                f"(headGroupSpec.{'.'.join(path)}): the dashboard and the Jobs API, which runs "
                "any command it is sent, would be reachable from outside the cluster. Set it to "
                "ClusterIP and reach the dashboard with `kubectl port-forward`.",
                args.urn,
            )


def _auth_problem(spec: dict[str, Any]) -> str | None:
    """What leaves a known RayCluster spec without token authentication, or None when it has it
    or cannot be told yet (preview). An absent authOptions, or one without a mode, is decided:
    KubeRay reads it as mode "disabled"."""
    options = spec.get("authOptions")
    if options is None:
        return "spec.authOptions is not set, which KubeRay reads as mode 'disabled'"
    if not isinstance(options, dict):
        return None  # not known yet
    mode = options.get("mode")
    if mode is None:
        return "spec.authOptions has no mode, which KubeRay reads as 'disabled'"
    if not known(mode) or mode == "token":
        return None
    return f"spec.authOptions.mode is {mode!r}"


@RULES.resource(
    "raycluster-token-auth",
    EnforcementLevel.MANDATORY,
    "The RayCluster has Ray token authentication on (authOptions.mode token).",
)
@on(_ray_cluster)
def token_authentication(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Without a token the Jobs API runs any command that any pod in the cluster sends it."""
    spec = at(props, "spec")
    problem = _auth_problem(spec) if isinstance(spec, dict) else None
    if problem:
        report_violation(
            f"{label} runs Ray without token authentication ({problem}): the Jobs API on its "
            "head runs any command that any pod in the cluster sends it. Set "
            'spec.authOptions.mode to "token" (KubeRay then generates the token into a Secret '
            "named after the cluster) and spec.rayVersion to the image's Ray version, "
            f"{MIN_RAY_VERSION_FOR_TOKEN_AUTH} or later, which KubeRay requires for it.",
            args.urn,
        )


def _selects_ray_head(selector: dict[str, Any]) -> bool:
    node_type = selector.get("ray.io/node-type")
    identifier = selector.get("ray.io/identifier")
    return (
        node_type == "head"
        or (isinstance(identifier, str) and identifier.endswith("-head"))
        or ("ray.io/cluster" in selector and "ray.io/node-type" not in selector)
    )


@RULES.resource(
    "ray-head-service-not-public",
    EnforcementLevel.MANDATORY,
    "No LoadBalancer or NodePort Service selects the Ray head.",
)
def head_service_not_public(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Any other Service in front of the head pod exposes the same Jobs API."""
    if args.resource_type != K8S_SERVICE:
        return
    props = plain(args.props)
    service_type, selector = at(props, "spec", "type"), at(props, "spec", "selector")
    if service_type in PUBLIC_SERVICE_TYPES and isinstance(selector, dict) and _selects_ray_head(selector):
        report_violation(
            f"{described('Kubernetes Service', args.name, props)} is a {service_type} in front "
            "of the Ray head: the dashboard and the Jobs API, which runs any command it is sent, "
            "would be reachable from outside the cluster. Make it a ClusterIP service and reach "
            "the dashboard with `kubectl port-forward`.",
            args.urn,
        )


def _ray_clusters(stack: StackView) -> Iterator[tuple[Any, str, TpuWorkerGroup]]:
    for cluster in stack.of_type(RAY_CLUSTER):
        label = described("RayCluster", cluster.name, cluster.props)
        for group in tpu_worker_groups(cluster.props):
            yield cluster, label, group


@RULES.stack(
    "raycluster-tpu-selectors",
    EnforcementLevel.MANDATORY,
    "TPU worker groups select a catalog accelerator and topology that the stack's TPU node pools provide.",
)
def tpu_selectors(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Worker pods must select an accelerator and topology that exist and that the stack's
    TPU node pools provide, or they stay pending forever."""
    stack = StackView(args.resources)
    pools = stack.tpu_pools()
    pools_known = stack.pools_decided() and all(isinstance(f.topology, str) for _, f in pools)
    provided = {(found.accelerator.name, found.topology) for _, found in pools} if pools_known else set()
    for cluster, label, group in _ray_clusters(stack):
        accelerator, topology = group.accelerator_label, group.topology
        if not known(accelerator, topology):
            continue
        if group.accelerator is None:
            valid = ", ".join(a.gke_accelerator for a in ACCELERATORS.values())
            problem = f"selects TPU accelerator {accelerator!r}, which is not in the catalog ({valid})"
        elif group.shape is None:
            problem = (
                f"selects topology {topology!r}, which TPU {group.accelerator.name} does not "
                f"offer ({', '.join(group.accelerator.shapes)})"
            )
        elif pools and pools_known and (group.accelerator.name, topology) not in provided:
            offered = ", ".join(sorted(f"{a} {t}" for a, t in provided))
            problem = (
                f"selects TPU {group.accelerator.name} {topology}, but the stack's TPU node pools provide {offered}"
            )
        else:
            continue
        report_violation(
            f"{label}: worker group '{group.name}' {problem}, so its pods would stay pending. Set "
            f"its {TPU_ACCELERATOR_LABEL} and {TPU_TOPOLOGY_LABEL} node "
            "selectors to the slices' accelerator and topology.",
            cluster.urn,
        )


@RULES.stack(
    "raycluster-replicas-match-slices",
    EnforcementLevel.MANDATORY,
    "TPU worker groups give a job one replica per TPU slice (node pool) of their shape.",
)
def replicas_match_slices(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """One worker-group replica per slice: the stack's TPU node pools of that shape (with the
    autoscaler, the most it may bring up: maxReplicas)."""
    stack = StackView(args.resources)
    pools = stack.tpu_pools()
    if not stack.pools_decided() or not all(isinstance(f.topology, str) for _, f in pools):
        return
    for cluster, label, group in _ray_clusters(stack):
        replicas, source = slices_for_a_job(at(cluster.props, "spec"), group.spec)
        if group.accelerator is None or not known(replicas):
            continue
        slices = sum(
            1
            for _, found in pools
            if found.accelerator.name == group.accelerator.name and found.topology == group.topology
        )
        if not slices or replicas == slices:
            continue
        effect = "replicas stay pending" if replicas > slices else "slices sit idle, billed"
        fix = (
            f"Set maxReplicas to {slices}"
            if source == "maxReplicas" and in_tree_autoscaling(at(cluster.props, "spec")) is True
            else f"Set replicas (and minReplicas, maxReplicas) to {slices}"
        )
        report_violation(
            f"{label}: worker group '{group.name}' gives a job {replicas} slices ({source}), but the "
            f"stack has {slices} TPU slice(s) (node pools) of {group.accelerator.name} {group.topology}, "
            f"so {effect}. {fix}.",
            cluster.urn,
        )
