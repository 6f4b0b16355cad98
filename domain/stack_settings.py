"""The infra stack's settings record: each setting declared once, as a field of `StackSettings`
(see domain/setting.py), with its default, its rule for one value, and the properties derived from
the fields. The builders of what the stack creates take it (domain/resources/); the checks of
several settings together, which read perf/ and the job's own checks, sit above them
(domain/config/settings.py, which reads a stack's config into this).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from domain.compile_cache import COMPILE_CACHE_PREFIX
from domain.gcp import dcn, gcp_names, gke, k8s_names
from domain.gcp.images import IMAGE_RULE, image_reference_problems, in_artifact_registry
from domain.setting import Field, setting
from domain.tpu.capacity_choices import CAPACITY_CHOICES, DEFAULT_CAPACITY, FLEX_START, RESERVATION, SPOT
from domain.tpu.tpu_catalog import Accelerator, SliceShape
from domain.training.job import PRESET, SLICES, preset_names
from domain.training.presets import PRESETS, Preset

MAX_SLICES = 64
# Cloud Storage's lifecycle condition `age` is a 32-bit integer (the JSON API's Bucket resource).
MAX_LIFECYCLE_AGE_DAYS = 2**31 - 1

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_REGION = re.compile(r"[a-z]+-[a-z]+\d+")

# Namespaces every cluster already has: the stack creates its namespace, which would fail.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
_STATE = "stored unencrypted in the stack's state"


def _named(what: str, problems_of: Callable[[str], list[str]], rule: str) -> Callable[[str], str | None]:
    """A check from domain/gcp/gcp_names.py's reasons and rule for one kind of name."""

    def check(value: str) -> str | None:
        problems = problems_of(value)
        return f"is not {what}: it {', '.join(problems)}; use {rule}" if problems else None

    return check


def _dns_label(max_length: int, also: Callable[[str], str | None] | None = None) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if len(value) > max_length or not _DNS_LABEL.fullmatch(value):
            reasons = gcp_names.rfc1035_problems(value, max_length=max_length)
            return (
                f"is not valid; use lowercase letters, digits and '-', starting with a letter, at most "
                f"{max_length} characters: it {', '.join(reasons)}"
            )
        return also(value) if also else None

    return check


def _kubernetes_name(
    what: str, problems_of: Callable[[str], list[str]], rule: str, also: Callable[[str], str | None]
) -> Callable[[str], str | None]:
    """A check from domain/gcp/k8s_names.py's reasons and rule, then `also`."""

    def check(value: str) -> str | None:
        problems = problems_of(value)
        if problems:
            return f"is not {what}: it {', '.join(problems)}; use {rule}"
        return also(value)

    return check


def _tpu_preset(name: str) -> str | None:
    if PRESETS[name].runs_on_tpu:
        return None
    return f"runs on CPU through a local Ray cluster, not on GKE; choose a TPU preset: {preset_names(on_tpu=True)}"


def _region(value: str) -> str | None:
    if _REGION.fullmatch(value):
        return None
    return "is not a Google Cloud region (for example us-east5); run `pulumi config set gcp:region <region>`"


def _labels(value: Mapping[str, Any]) -> str | None:
    problems = gcp_names.labels_problems(value)
    if not problems:
        return None
    return f"is refused by GCP on every labelled resource: it {'; it '.join(problems)}; use {gcp_names.LABELS_RULE}"


def _capacity(value: tuple[str, ...]) -> str | None:
    unknown = [choice for choice in value if choice not in CAPACITY_CHOICES]
    if unknown:
        return f"has {', '.join(map(repr, unknown))}, which is not a capacity choice; choose from: {', '.join(CAPACITY_CHOICES)}"
    if not value:
        return f"is empty; choose at least one of: {', '.join(CAPACITY_CHOICES)} (default: {DEFAULT_CAPACITY[0]})"
    repeated = sorted({choice for choice in value if value.count(choice) > 1})
    if repeated:
        return f"names {', '.join(map(repr, repeated))} more than once; list each choice once, in order of preference"
    return None


def _own_namespace(value: str) -> str | None:
    if value not in SYSTEM_NAMESPACES:
        return None
    return (
        "is a namespace every cluster already has; the stack creates its namespace, which would fail; "
        "use a namespace of its own (or default)"
    )


def _own_service_account(value: str) -> str | None:
    if value != "default":
        return None
    return (
        "is the account Kubernetes creates in every namespace; the stack creates its own Ray service "
        "account, which would fail; use another name (for example maxtext-ray)"
    )


# A dataset prefix becomes the dataset mount's `only-dir=PREFIX` option, in a comma-separated list of
# mount options (domain/resources/kuberay.py): folder names of these characters only, so no prefix
# can end the option or add another.
_PREFIX_CHARACTER = re.compile(r"[A-Za-z0-9._-]")
DATASET_PREFIX_MAX = 1024  # bytes: Cloud Storage's longest object name
DATASET_PREFIX_RULE = (
    "use folder names of letters, digits, '-', '_' and '.' separated by single '/', with no '/' at either "
    "end (for example corpora/web-v1)"
)
# The dataset's file cache is a RAM disk on each TPU host, beside the worker's own memory
# (domain/resources/kuberay.py): at most this much of it.
DATASET_FILE_CACHE_MAX_MIB = 262144


def _dataset_prefix(value: str) -> str | None:
    segments = value.split("/")
    if value.startswith("/") or value.endswith("/"):
        return f"starts or ends with '/'; {DATASET_PREFIX_RULE}"
    if len(value.encode()) > DATASET_PREFIX_MAX:
        return f"is longer than Cloud Storage's {DATASET_PREFIX_MAX} bytes for an object name; use a shorter folder"
    if "" in segments:
        return f"has an empty folder name ('//'); {DATASET_PREFIX_RULE}"
    if any(segment in (".", "..") for segment in segments):
        return f"has a '.' or '..' folder, which a mount cannot show; {DATASET_PREFIX_RULE}"
    bad = sorted({character for character in value.replace("/", "") if not _PREFIX_CHARACTER.fullmatch(character)})
    if bad:
        return (
            f"has {', '.join(map(repr, bad))}, which the mount's only-dir option (one of a comma-separated list) "
            f"cannot carry; {DATASET_PREFIX_RULE}"
        )
    return None


@dataclass(frozen=True, kw_only=True)
class StackSettings:
    """Everything the infra program needs to know, validated. Each `setting(...)` field is one
    stack setting, declared here and nowhere else (see domain/setting.py). Every infra setting's
    value ends up in outputs, names or state in clear (`in_clear` says where), so none may be
    set with `pulumi config set --secret`: the program reads plain values, and a secret's
    encryption would not survive that."""

    stack: str  # the Pulumi stack's name (not a setting)

    project: Field[str] = setting(
        "string",
        "Google Cloud project ID the stack deploys into (the Google provider's setting).",
        namespace="gcp",
        required="<project-id>",
        check=_named("a project ID", gcp_names.project_id_problems, gcp_names.PROJECT_ID_RULE),
        in_clear="it is part of the clusterId and kubeconfig outputs, the Workload Identity pool and the image URL",
    )
    region: Field[str] = setting(
        "string",
        "Region of the bucket, the image repository and an Autopilot cluster (the Google provider's setting).",
        namespace="gcp",
        required="<region>",
        check=_region,
        in_clear="it is the clusterLocation output of an Autopilot stack, the bucket's location and part of the image URL",
    )
    zone: Field[str] = setting(
        "string",
        "Zone of a Standard cluster and its TPU node pools, in gcp:region (the Google provider's setting).",
        namespace="gcp",
        required="<zone>",
        in_clear="it is the clusterLocation output of a Standard stack and the node pools' location",
    )
    default_labels: Field[Mapping[str, str]] = setting(
        "object",
        "Labels the Google provider adds to every resource it creates (the Google provider's setting).",
        namespace="gcp",
        default={},
        check=_labels,
        in_clear=f"they label every resource, {_STATE}",
    )
    preset: Field[Preset] = setting(
        PRESET,
        f"Training preset: {preset_names(on_tpu=True)} ({preset_names(on_tpu=False)} runs locally, not on GKE).",
        default="llama3-8b",
        check=_tpu_preset,
        in_clear="it is exported as the preset output",
    )
    mode: Field[str] = setting(
        "string",
        "GKE mode: standard (TPU node pools, DCN networks) or autopilot (ComputeClass).",
        default="standard",
        choices=gke.MODES,
        in_clear="it is exported as the mode output",
    )
    cluster_name: Field[str] = setting(
        "string",
        "GKE cluster name; also prefixes the DCN networks and the worker image repository.",
        default="maxtext-tpu",
        check=_dns_label(gcp_names.GKE_CLUSTER_NAME_MAX),
        in_clear="it names the GKE cluster (the clusterName output), its node service account, DCN networks and image repository",
    )
    gke_version: Field[str] = setting(
        "string",
        "Minimum control-plane version; must be at or above the managed DRANET minimum for the mode.",
        default=gke.DEFAULT_VERSION,
        in_clear=f"it is the cluster's minimum version, {_STATE}",
    )
    release_channel: Field[str] = setting(
        "string",
        "GKE release channel offering gkeVersion: RAPID, REGULAR, STABLE or EXTENDED.",
        default="RAPID",
        choices=gke.RELEASE_CHANNELS,
        in_clear=f"it is the cluster's release channel, {_STATE}",
    )
    network: Field[str] = setting(
        "string",
        "Primary VPC network of the cluster.",
        default="default",
        check=_named("a VPC network name", gcp_names.network_name_problems, gcp_names.NETWORK_RULE),
        in_clear=f"it is the cluster's network, {_STATE}",
    )
    slices: Field[int] = setting(
        SLICES,
        f"Number of TPU slices (1 to {MAX_SLICES}); defaults to the preset's.",
        unset="the preset's",
        maximum=MAX_SLICES,
        in_clear="it is exported as the slices output and numbers the TPU node pools",
    )
    topology: Field[str] = setting(
        "string",
        "TPU slice topology (for example 4x4); defaults to the preset's.",
        unset="the preset's",
        in_clear="it is exported as the topology output and names the TPU node pools",
    )
    capacity: Field[tuple[str, ...]] = setting(
        "array",
        "How TPU nodes are obtained, in order of preference: reservation, on-demand, spot, flex-start. "
        "Standard takes one; Autopilot takes a fallback order (ComputeClass priorities).",
        default=DEFAULT_CAPACITY,
        check=_capacity,
        in_clear=f"it is the TPU node pools' provisioning model (or the ComputeClass priorities), {_STATE}",
    )
    min_slices: Field[int] = setting(
        "integer",
        "TPU slices kept up while no job runs (0 to slices); the Ray autoscaler adds the rest for a job "
        "and removes them after idleTimeoutSeconds.",
        default=0,
        minimum=0,
        maximum=MAX_SLICES,
        in_clear=f"it is the worker group's minReplicas and the node pools' autoscaling, {_STATE}",
    )
    idle_timeout_seconds: Field[int] = setting(
        "integer",
        "Seconds a slice with no work stays up before the Ray autoscaler removes it (when minSlices < slices). "
        "Weigh it against what bringing the slice back costs: the workloads stack's coldStartSeconds and "
        "coldStartDollars (warmStart* with image streaming and a compilation-cache hit) price a start from zero, "
        "while an idle slice costs idleDollarsPerHour.",
        default=300,
        minimum=30,
        maximum=86400,
        in_clear=f"it is the RayCluster's autoscaler idle timeout, {_STATE}",
    )
    reservation: Field[str | None] = setting(
        "string",
        "Name of a specific Compute Engine reservation for the TPU nodes (with reservation in capacity).",
        check=_named("a reservation name", gcp_names.reservation_problems, gcp_names.RESERVATION_RULE),
        in_clear=f"it is the TPU node pools' reservation affinity, {_STATE}",
    )
    dcn_subnets: Field[tuple[str, ...]] = setting(
        "array",
        "CIDR ranges of the DCN subnets, one per extra network (two for v6e).",
        default=dcn.DEFAULT_SUBNET_RANGES,
        in_clear=f"they are the DCN subnets' ranges, {_STATE}",
    )
    namespace: Field[str] = setting(
        "string",
        "Kubernetes namespace of the Ray cluster.",
        default="default",
        check=_kubernetes_name(
            "a Kubernetes namespace name", k8s_names.label_problems, k8s_names.NAMESPACE_RULE, _own_namespace
        ),
        in_clear="it is exported as the namespace output and names the Kubernetes objects' namespace",
    )
    service_account: Field[str] = setting(
        "string",
        "Kubernetes service account of the Ray pods (granted the checkpoint bucket).",
        default="maxtext-ray",
        check=_kubernetes_name(
            "a Kubernetes service account name",
            k8s_names.subdomain_problems,
            k8s_names.SUBDOMAIN_RULE,
            _own_service_account,
        ),
        in_clear="it is exported as the serviceAccount output and is part of the bucket's IAM member",
    )
    bucket_name: Field[str | None] = setting(
        "string",
        "Checkpoint bucket name; auto-named with a random suffix when unset.",
        unset="auto-named",
        check=_named("a Cloud Storage bucket name", gcp_names.bucket_name_problems, gcp_names.BUCKET_NAME_RULE),
        in_clear="it is exported as the bucketName and checkpointBucketUrl outputs",
    )
    dataset_bucket: Field[str | None] = setting(
        "string",
        "An existing bucket holding the training data, mounted read-only at /dataset on every TPU worker; the "
        "Ray pods get roles/storage.objectViewer on it alone. The stack never creates, changes or deletes it.",
        unset="no dataset mount",
        check=_named(
            "a Cloud Storage bucket name", gcp_names.bucket_name_problems, gcp_names.EXISTING_BUCKET_NAME_RULE
        ),
        in_clear="it is exported as the datasetUri output and is part of the dataset mount and its IAM binding",
    )
    dataset_prefix: Field[str | None] = setting(
        "string",
        "A folder inside datasetBucket to mount instead of the whole bucket (for example corpora/web-v1): "
        "/dataset then shows that folder's contents.",
        unset="the whole bucket",
        check=_dataset_prefix,
        in_clear="it is exported as part of the datasetUri output and is the dataset mount's only-dir option",
    )
    dataset_file_cache_mib: Field[int | None] = setting(
        "integer",
        "MiB of RAM on each TPU host for a Cloud Storage FUSE file cache of the dataset (a bounded RAM disk, "
        f"never the boot disk; 1 to {DATASET_FILE_CACHE_MAX_MIB}). Set it only when the dataset fits and is "
        "read more than once (several epochs); unset: no file cache.",
        unset="no file cache",
        minimum=1,
        maximum=DATASET_FILE_CACHE_MAX_MIB,
        in_clear=f"it is the dataset mount's file-cache:max-size-mb, {_STATE}",
    )
    compile_cache_max_age_days: Field[int] = setting(
        "integer",
        f"Days after which the checkpoint bucket deletes an entry of the jobs' compilation cache (its "
        f"{COMPILE_CACHE_PREFIX}/ prefix): JAX never evicts anything from a remote cache, so without this the "
        "cache grows with every new shape, flag and JAX or libtpu version for ever. Counted from when an "
        "entry was written: one still in use is compiled again once per period.",
        default=30,
        minimum=1,
        maximum=MAX_LIFECYCLE_AGE_DAYS,
        valid=f"use a whole number of days, 1 or more (at most {MAX_LIFECYCLE_AGE_DAYS}), for example 30",
        in_clear=f"it is the checkpoint bucket's lifecycle rule, {_STATE}",
    )
    bucket_force_destroy: Field[bool] = setting(
        "boolean",
        "Let `pulumi destroy` delete a bucket that still holds checkpoints (a production stack must set false).",
        default=True,
        in_clear=f"it is the bucket's force_destroy, {_STATE}",
    )
    bucket_hierarchical_namespace: Field[bool] = setting(
        "boolean",
        "Create the checkpoint bucket with hierarchical namespace, as GKE advises for checkpoints: Orbax's commit "
        "(a directory rename) is then one atomic folder rename, not a copy and delete of every file that a "
        "preemption can leave half done. Cloud Storage reads it only when it creates the bucket: set it before "
        "the stack's first `pulumi up`. Changed on a stack that has its bucket, it replaces the bucket, and the "
        "old one goes with every checkpoint in it (bucketForceDestroy) or the update fails on them.",
        default=False,
        in_clear=f"it is the bucket's hierarchical namespace, {_STATE}",
    )
    deletion_protection: Field[bool] = setting(
        "boolean",
        "Protect the GKE cluster from deletion (turn on for production).",
        default=False,
        in_clear=f"it is the cluster's deletion_protection, {_STATE}",
    )
    production: Field[bool] = setting(
        "boolean",
        "Marks a production stack (it then requires deletionProtection and bucketForceDestroy = false).",
        default=False,
        in_clear="it becomes the cluster's environment label",
    )
    ray_image: Field[str | None] = setting(
        "string",
        "Worker image for the Ray head and workers, used as-is: a build of trainer/Dockerfile named "
        "REGISTRY/PATH/maxtext-ray, pinned by tag or digest. Unset: the stack "
        "builds trainer/Dockerfile (Ray and MaxText baked in) with Cloud Build into its own Artifact "
        "Registry repository and uses that.",
        unset="built by the stack",
        check=_named("a pinned container image", image_reference_problems, IMAGE_RULE),
        in_clear="it is exported as the rayImage output and set on every Ray pod",
    )
    image_streaming: Field[bool] = setting(
        "boolean",
        "GKE image streaming on a Standard cluster's TPU and Ray head node pools: a new node starts the "
        "worker's containers while their image streams from Artifact Registry, instead of after pulling it "
        "whole. GKE streams images from Artifact Registry only (the stack's own build is there); a rayImage "
        "elsewhere is pulled whole. Autopilot streams eligible images itself.",
        default=True,
        in_clear=f"it is the node pools' gcfsConfig, {_STATE}",
    )
    image_cache_disk: Field[str | None] = setting(
        "string",
        "A Compute Engine disk image holding the worker image (built with GKE's gke-disk-image-builder), "
        "attached to every TPU node as a secondary boot disk in CONTAINER_IMAGE_CACHE mode, so a new node "
        "has the image before its first pod: global/images/NAME, or projects/PROJECT_ID/global/images/NAME "
        f"for another project's. Standard only; needs imageStreaming and GKE {gke.SECONDARY_BOOT_DISK_MINIMUM_VERSION} "
        "or later.",
        unset="no image cache disk",
        check=_named("a disk image path", gcp_names.disk_image_problems, gcp_names.DISK_IMAGE_RULE),
        in_clear=f"it is the TPU node pools' secondary boot disk, {_STATE}",
    )
    head_machine_type: Field[str] = setting(
        "string",
        "Machine type of the on-demand CPU pool that runs the Ray head (Standard mode).",
        default="n1-standard-16",
        check=_named("a machine type", gcp_names.machine_type_problems, gcp_names.MACHINE_TYPE_RULE),
        in_clear=f"it is the head pool's machine type, {_STATE}",
    )
    price_per_chip_hour: Field[float | None] = setting(
        "number",
        "US dollars per TPU chip-hour of the first capacity choice, for the cost outputs; defaults to the "
        "catalog's list price for that choice in gcp:region (v6e on demand 2.70 in US regions; flex-start has "
        "none: set this for dollar figures).",
        unset="the catalog's list price",
        above=0,
        valid="use a positive number of US dollars, for example 2.70",
        in_clear=(
            "it is exported as the pricePerChipHourUsd output and prices trainingDollarsPerHour, "
            "idleDollarsPerHour and idleDollarsPerDay"
        ),
    )

    @property
    def accelerator(self) -> Accelerator:
        return self.preset.accelerator

    @property
    def slice_shape(self) -> SliceShape:
        return self.accelerator.shape(self.topology)

    @property
    def primary_capacity(self) -> str:
        return self.capacity[0]

    @property
    def spot(self) -> bool:
        """The TPU nodes may be Spot VMs, so preemption handling applies (docs/spot.md)."""
        return SPOT in self.capacity

    @property
    def flex_start(self) -> bool:
        return FLEX_START in self.capacity

    @property
    def uses_reservation(self) -> bool:
        return RESERVATION in self.capacity

    @property
    def autoscales(self) -> bool:
        """Slices beyond minSlices come and go with the jobs (the Ray autoscaler, GKE's pools)."""
        return self.min_slices < self.slices

    @property
    def is_autopilot(self) -> bool:
        return self.mode == "autopilot"

    @property
    def cluster_location(self) -> str:
        """Autopilot clusters are regional; the procedure's Standard cluster is zonal."""
        return self.region if self.is_autopilot else self.zone

    @property
    def total_chips(self) -> int:
        return self.slices * self.slice_shape.chips

    @property
    def dataset_uri(self) -> str | None:
        """The dataset as a `gs://` URL (its prefix included), or None without datasetBucket."""
        if self.dataset_bucket is None:
            return None
        return (
            f"gs://{self.dataset_bucket}/{self.dataset_prefix}"
            if self.dataset_prefix
            else f"gs://{self.dataset_bucket}"
        )

    @property
    def dcn_networks(self) -> int:
        """The DCN networks the stack creates: the accelerator's, on a Standard cluster (its TPU pools
        attach them as extra VPCs); Autopilot manages them itself."""
        return self.accelerator.dcn_networks if self.mode == "standard" else 0

    @property
    def uses_dcn_networks(self) -> bool:
        return self.dcn_networks > 0

    @property
    def streams_images(self) -> bool:
        """The stack's node pools stream the worker image (gcfsConfig): on a Standard cluster with
        imageStreaming, for an image in Artifact Registry, the only registry GKE streams from.
        Autopilot streams eligible images itself and has no node pools."""
        return (
            self.mode == "standard"
            and self.image_streaming
            and (self.ray_image is None or in_artifact_registry(self.ray_image))
        )
