"""The RayCluster's worker groups and pods (KubeRay `ray.io/v1`, read through
`policies.rules.raycluster_props`): the TPU worker groups' shape, the images and privileges its
containers run with, and its Cloud Storage FUSE volumes.

A worker group is a TPU worker group when its pods select a TPU accelerator
(`cloud.google.com/gke-tpu-accelerator`). Its shape must be the slices' shape: one replica per
slice, one host per VM, the VM's chips per host. A group that scales (minReplicas < maxReplicas)
needs KubeRay's in-tree autoscaler with Ray autoscaler v2, and then maxReplicas is the number of
slices a job gets. A mismatch leaves pods pending or JAX waiting for peers that never come, on TPU
nodes billed by the hour. Whether the stack's TPU node pools provide those slices:
`policies.rules.raycluster_pools`; the head: `policies.rules.ray_head`.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs

from domain.resources.kuberay import AUTOSCALER_VERSION, DATASET_MOUNT, GCS_FUSE_DRIVER
from policies.rules.common import (
    UNKNOWN,
    at,
    container_tpu_limit,
    known,
    on,
    requests_tpu,
    tpu_worker_groups,
    whole_number,
)
from policies.rules.declare import Rules
from policies.rules.raycluster_props import (
    autoscaler_version,
    container_name,
    every_container,
    in_tree_autoscaling,
    pod_containers,
    pod_specs,
    ray_cluster,
    slices_for_a_job,
)

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()

MOVING_TAGS = ("latest", "nightly")


@RULES.resource(
    "raycluster-hosts-per-slice",
    EnforcementLevel.MANDATORY,
    "TPU worker groups have one host per VM of the selected topology.",
)
@on(ray_cluster)
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
@on(ray_cluster)
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
                    f"{label}: {container_name(container)} of worker group '{group.name}' asks "
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
@on(ray_cluster)
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
@on(ray_cluster)
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
        version = autoscaler_version(spec)
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
@on(ray_cluster)
def images_pinned(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """A moving tag can give hosts of one slice different Ray or JAX builds, and a rerun a
    different program than the one that was tested."""
    for named, container in every_container(props):
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
@on(ray_cluster)
def privileged_only_for_tpu(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Privileged is needed for TPU device access on Standard pools, and nowhere else."""
    for named, container in every_container(props):
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
@on(ray_cluster)
def fuse_file_cache_bounded(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """An unbounded Cloud Storage FUSE file cache fills its cache volume, by default the node's
    boot disk, with everything read through the mount: a whole checkpoint on a restore."""
    for where, pod_spec in pod_specs(props):
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


@RULES.resource(
    "raycluster-dataset-mount-read-only",
    EnforcementLevel.MANDATORY,
    f"A Cloud Storage FUSE volume mounted at the dataset root ({DATASET_MOUNT}) is read-only (its CSI volume and every mount).",
)
@on(ray_cluster)
def dataset_mount_read_only(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """The training data is only read: a Cloud Storage FUSE volume mounted at the dataset root
    must be read-only, both the CSI volume (the driver then mounts the bucket read-only) and every
    container's mount of it, so no job can change or delete the data another run trains on."""
    for where, pod_spec in pod_specs(props):
        volumes = at(pod_spec, "volumes")
        by_name = {
            volume.get("name"): volume
            for volume in (volumes if isinstance(volumes, list) else [])
            if isinstance(volume, dict) and isinstance(volume.get("name"), str)
        }
        for container in pod_containers(pod_spec):
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
                    for what, node in (("the CSI volume", csi), (f"{container_name(container)}'s mount", mount))
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
