"""The infra stack's settings: each declared once (a field of `StackSettings`), read once from raw
stack config into a frozen, validated object.

Every problem is reported at once, each naming the setting, the value and what would be valid,
so a stack with bad config stops before a single resource (and a single TPU hour) is requested.
Pulumi.yaml's `config:` block and the README's settings table are generated from the fields
(`scripts/sync-settings`); a test fails when they drift.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from domain.compile_cache import COMPILE_CACHE_PREFIX
from domain.gcp import dcn, gcp_names, gke, k8s_names, resource_names
from domain.gcp.images import (
    IMAGE_RULE,
    WORKER_IMAGE_NAME,
    image_reference_problems,
    in_artifact_registry,
    is_worker_image,
    ray_version_of,
    registry_of,
)
from domain.gcp.machine_types import machine_size
from domain.perf.capacity import StackCost, price_problem, stack_cost
from domain.problems import ProblemsError
from domain.ray import ray_head
from domain.ray.ray_version import MIN_RAY_VERSION_FOR_TOKEN_AUTH, RAY_VERSION, version_key
from domain.setting import Field, Partial, Reading, read, setting
from domain.tpu.capacity_choices import CAPACITY_CHOICES, DEFAULT_CAPACITY, FLEX_START, RESERVATION, SPOT
from domain.tpu.tpu_catalog import (
    FLEX_START_ZONES,
    FLEX_START_ZONES_SOURCE,
    TPU_ZONES_SOURCE,
    Accelerator,
    SliceShape,
    single_tenant_zones,
    zone_region,
)
from domain.training.job import PRESET, SLICES, JobError, preset_names, resolve_job, topology_problem
from domain.training.presets import PRESETS, Preset

MAX_SLICES = 64
# Cloud Storage's lifecycle condition `age` is a 32-bit integer (the JSON API's Bucket resource).
MAX_LIFECYCLE_AGE_DAYS = 2**31 - 1

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_REGION = re.compile(r"[a-z]+-[a-z]+\d+")
# A zone is its region plus a letter (`us-east5-b`), or an AI zone's `ai<N><letter>` (`us-south1-ai1b`).
_ZONE_SUFFIX = re.compile(r"[a-z]|ai\d+[a-z]")

# Namespaces every cluster already has: the stack creates its namespace, which would fail.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
# The label that records the stack on the cluster (domain/gcp/gcp_resources.py).
STACK_LABEL = "maxtext-tpu-stack"
_STATE = "stored unencrypted in the stack's state"

# Settings of earlier releases, and what says the same now: the stack stops on them rather than
# running with the setting silently gone.
RETIRED = {
    "spot": (
        "is no longer a setting: capacity says how TPU nodes are obtained; run `pulumi config rm spot` and, "
        "for Spot VMs, `pulumi config set capacity spot`"
    ),
}


class SettingsError(ProblemsError):
    """Stack config that cannot be deployed."""

    heading = "invalid stack configuration"


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
# mount options (domain/ray/kuberay.py): folder names of these characters only, so no prefix can
# end the option or add another.
_PREFIX_CHARACTER = re.compile(r"[A-Za-z0-9._-]")
DATASET_PREFIX_MAX = 1024  # bytes: Cloud Storage's longest object name
DATASET_PREFIX_RULE = (
    "use folder names of letters, digits, '-', '_' and '.' separated by single '/', with no '/' at either "
    "end (for example corpora/web-v1)"
)
# The dataset's file cache is a RAM disk on each TPU host, beside the worker's own memory
# (domain/ray/kuberay.py): at most this much of it.
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


class PartialStackSettings(Partial, StackSettings):
    """StackSettings as read so far, each field None where unset or refused (`Partial`): what the
    checks of several settings read."""


# A setting by its field, for checks and messages to name it by (`_F.zone`; mypy knows each).
_F = StackSettings


# Settings that only a Standard cluster uses, and what an Autopilot cluster does instead: set (to
# anything but the default) on an Autopilot stack, they would do nothing, which is a mistake.
STANDARD_ONLY: dict[Field[Any], str] = {
    _F.head_machine_type: "Autopilot chooses the Ray head's node from the head pod's own requests",
    _F.dcn_subnets: "Autopilot gives the TPU pods their DCN interfaces itself (DRANET through the ComputeClass)",
    _F.image_streaming: "Autopilot streams eligible images itself, and it cannot be turned off there",
    _F.image_cache_disk: (
        "Autopilot has no node pools: it attaches a secondary boot disk through the pods' node selectors and "
        "an allowlist, which this stack does not build"
    ),
}


def _key(field: Field[Any]) -> str:
    """A field's setting as the user types it (`minSlices`, `gcp:zone`), as messages name it."""
    return field.setting.key


def _derived_problem(key: str, value: str, derived: str, service: str, problems: list[str], fix: str) -> str:
    """A name the program builds from a setting, refused by the service that gets it."""
    return f"{key} = {value!r} makes {derived}, which {service} refuses: it {', '.join(problems)}; {fix}"


def _read_settings(reading: Reading[StackSettings]) -> PartialStackSettings:
    """The settings `read`, as a partial `StackSettings` for the checks that involve several of them
    (`Reading.partial`: None where unset with no default or refused; a check below may refuse a
    value that stays here). The preset is resolved, and its shape where the stack sets none: its
    topology ("" where unknown) and slice count."""
    as_read = reading.partial(PartialStackSettings)
    name: str | None = reading.value(_F.preset)  # the preset as read: its name
    preset = PRESETS[name] if name is not None else None
    slices = as_read.slices
    if slices is None and preset is not None and reading.ok(_F.slices):
        slices = preset.slices
    topology = as_read.topology or (preset.topology if preset else "")
    return reading.partial(PartialStackSettings, preset=preset, slices=slices, topology=topology)


def _topology_ok(settings: PartialStackSettings) -> bool:
    return settings.preset is not None and topology_problem(settings.accelerator, settings.topology) is None


def _shape(settings: PartialStackSettings) -> tuple[Preset, SliceShape, int] | None:
    """The preset, its slice shape and the slice count, where all three are valid."""
    if settings.preset is None or settings.topology is None or settings.slices is None or not _topology_ok(settings):
        return None
    return settings.preset, settings.slice_shape, settings.slices


def _dcn_networks(settings: PartialStackSettings) -> int:
    """`StackSettings.dcn_networks`, 0 where the preset was refused."""
    return settings.dcn_networks if settings.preset is not None else 0


def parse_settings(
    raw: Mapping[str, Any], *, stack: str, project_name: str, secret_keys: Set[str] = frozenset()
) -> StackSettings:
    """Validates raw stack config: the project's keys bare (`slices`), the Google provider's
    qualified (`gcp:zone`); `secret_keys` names those set with `pulumi config set --secret`.
    Raises SettingsError listing every problem when anything is wrong."""
    retired = {key: RETIRED[key] for key in raw if key in RETIRED}
    reading = read(
        StackSettings,
        {key: value for key, value in raw.items() if key not in retired},
        project_name=project_name,
        secret_keys=secret_keys,
    )
    reading.problems += [f"{key} {why}" for key, why in retired.items()]
    settings = _read_settings(reading)
    # In this order: a check skips a setting an earlier one refused (so one mistake is one message).
    for problems_of in (
        _location_problems,
        _shape_problems,
        _gke_version_problems,
        _standard_only_problems,
        _dcn_problems,
        _image_and_machine_problems,
        _price_problems,
        _reservation_problems,
        _capacity_problems,
        _flex_start_problems,
        _protection_problems,
        _dataset_problems,
        _name_problems,
    ):
        reading.problems += problems_of(reading, settings)
    reading.problems += _stack_name_problems(stack)

    reading.raise_problems(SettingsError)
    return reading.complete(settings, stack=stack)


def _location_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    """gcp:zone in gcp:region (refused otherwise, so the zone's other checks are skipped)."""
    region, zone = settings.region, settings.zone
    if not (region and zone):
        return []
    if zone.startswith(f"{region}-") and _ZONE_SUFFIX.fullmatch(zone[len(region) + 1 :]):
        return []
    reading.refuse(_F.zone)
    return [
        f"{reading.stated(_F.zone)} is not a zone of region {region!r}; use {region}-a, "
        f"{region}-b, ... (one with capacity for the preset's TPUs)"
    ]


def _shape_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    """The preset's TPUs: a topology of its accelerator, offered where the cluster is, and its
    MaxText mesh fitting the shape."""
    chosen, mode, region, zone = settings.preset, settings.mode, settings.region, settings.zone
    if chosen is None:
        return []
    problems = []
    wrong_topology = topology_problem(chosen.accelerator, settings.topology)
    if wrong_topology is not None:
        problems.append(f"{reading.stated(_F.topology, settings.topology)} {wrong_topology}")
    # Where the TPUs are: Standard pools live in gcp:zone; Autopilot picks a zone of gcp:region.
    if mode is not None and region and zone:
        problems += _availability_problems(chosen.accelerator, mode, region, zone)
        if settings.capacity is not None and not problems:
            problems += _single_tenant_problems(chosen.accelerator, mode, region, zone, settings.capacity)
    # The preset's MaxText mesh, exactly as a job on this cluster would be checked.
    shape = _shape(settings)
    if shape is not None:
        problems += _mesh_problems(chosen, shape[1].topology, shape[2])
    return problems


def _gke_version_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    mode, gke_version = settings.mode, settings.gke_version
    if mode is None or gke_version is None:
        return []
    stated = reading.stated(_F.gke_version, gke_version)
    try:
        # The Spot minimum is above Standard's DRANET minimum, so a Spot stack below it hears only
        # the version that satisfies both.
        if (
            mode == "standard"
            and SPOT in (settings.capacity or ())
            and not gke.supports_spot_shutdown_grace(gke_version)
        ):
            return [
                f"{stated} with capacity = spot: the Spot TPU node pools extend the kubelet's shutdown "
                "grace period so the Ray workers can checkpoint before the node goes (docs/spot.md), which GKE takes "
                f"from {gke.SPOT_SHUTDOWN_GRACE_MINIMUM_VERSION}; use {gke.SPOT_SHUTDOWN_GRACE_MINIMUM_VERSION} or "
                "later, or another capacity choice"
            ]
        if (
            mode == "standard"
            and settings.image_cache_disk is not None
            and not gke.supports_secondary_boot_disk(gke_version)
        ):
            floor = max(
                (gke.SECONDARY_BOOT_DISK_MINIMUM_VERSION, gke.DRANET_MINIMUM_VERSION[mode]), key=gke.parse_version
            )
            return [
                f"{stated} with {reading.key(_F.image_cache_disk)}: GKE attaches secondary boot disks to a node "
                f"pool from {gke.SECONDARY_BOOT_DISK_MINIMUM_VERSION}; use {floor} or later (the managed DRANET "
                f"minimum for {mode} clusters included), or `pulumi config rm {reading.key(_F.image_cache_disk)}`"
            ]
        if not gke.supports_dranet(gke_version, mode):
            return [
                f"{stated} is below the managed DRANET minimum for {mode} clusters; use "
                f"{gke.DRANET_MINIMUM_VERSION[mode]} or later"
            ]
    except ValueError as error:
        return [f"{reading.key(_F.gke_version)}: {error}"]
    return []


def _standard_only_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    """Settings set on an Autopilot stack that only a Standard cluster uses (refused, so their
    other checks are skipped)."""
    problems = []
    for field, instead in STANDARD_ONLY.items():
        value = reading.value(field)
        if settings.mode == "autopilot" and reading.changed(field):
            problems.append(
                f"{reading.stated(field, list(value) if isinstance(value, tuple) else None)} does "
                f"nothing on an Autopilot stack ({instead}); unset it (`pulumi config rm {reading.key(field)}`), or "
                "use mode = standard"
            )
            reading.refuse(field)
    return problems


def _dcn_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    """A Standard cluster's DCN subnets: valid ranges, room for every TPU VM, clear of the
    primary network, one per DCN network."""
    dcn_subnets, region, network = settings.dcn_subnets, settings.region, settings.network
    if dcn_subnets is None or settings.mode != "standard":
        return []
    # Each TPU VM of every slice takes one address in each DCN subnet.
    shape = _shape(settings)
    vms = shape[1].vms * shape[2] if shape is not None else None
    problems = [
        f"{reading.key(_F.dcn_subnets)}: {problem}; use {dcn.VALID_RULE}"
        for problem in dcn.subnet_range_problems(dcn_subnets, vms=vms)
    ]
    if region and network:
        problems += [
            f"{reading.key(_F.dcn_subnets)}: {problem}"
            for problem in dcn.primary_overlap_problems(dcn_subnets, network=network, region=region)
        ]
    if settings.preset is not None and len(dcn_subnets) != settings.dcn_networks:
        problems.append(
            f"{reading.key(_F.dcn_subnets)} has {len(dcn_subnets)} ranges but TPU {settings.preset.accelerator.name} needs "
            f"{settings.dcn_networks} DCN networks; give exactly {settings.dcn_networks} "
            f"(default: {', '.join(dcn.DEFAULT_SUBNET_RANGES)})"
        )
    return problems


def _image_and_machine_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    problems = []
    machine_type, slices, min_slices = settings.head_machine_type, settings.slices, settings.min_slices
    if settings.mode == "standard" and machine_type:
        autoscales = slices is not None and min_slices is not None and min_slices < slices
        problems += _head_machine_problems(machine_type, autoscales=autoscales)
    if settings.ray_image:
        problems += _ray_image_problems(reading.stated(_F.ray_image), settings.ray_image)
    problems += _image_cache_disk_problems(reading, settings)
    return problems


def _image_cache_disk_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    """A container image cache disk is read only by a node pool that streams images (GKE's
    secondary boot disk page), which it does only for an image in Artifact Registry."""
    disk, image = settings.image_cache_disk, settings.ray_image
    if disk is None or settings.mode != "standard":
        return []
    disk_stated, streaming = reading.stated(_F.image_cache_disk), reading.key(_F.image_streaming)
    if settings.image_streaming is False:
        return [
            f"{disk_stated} needs {streaming} = true: GKE reads a container image cache disk only on node pools "
            f"with image streaming; run `pulumi config set {streaming} true`, or "
            f"`pulumi config rm {reading.key(_F.image_cache_disk)}`"
        ]
    if image is not None and is_worker_image(image) and not in_artifact_registry(image):
        return [
            f"{disk_stated} needs image streaming, which GKE does only for images in Artifact Registry, and "
            f"{reading.stated(_F.ray_image)} is in {registry_of(image) or 'Docker Hub'}; push it to an Artifact "
            f"Registry repository (LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/{WORKER_IMAGE_NAME}), unset "
            f"{reading.key(_F.ray_image)} to use the stack's own build, or `pulumi config rm "
            f"{reading.key(_F.image_cache_disk)}`"
        ]
    return []


def image_streaming_note(settings: StackSettings) -> str | None:
    """Why a Standard stack with imageStreaming does not stream its worker image, for the program
    to say (a warning, not a refusal: imageStreaming is on by default, and the image is pulled whole)."""
    image = settings.ray_image
    if settings.mode != "standard" or not settings.image_streaming or image is None or settings.streams_images:
        return None
    return (
        f"{_key(_F.ray_image)} = {image!r} is in {registry_of(image) or 'Docker Hub'}, not Artifact Registry, so "
        "GKE cannot stream it: the node pools are created without image streaming and every new node pulls "
        "the whole image before its first pod starts. Push the image to Artifact Registry "
        f"(LOCATION-docker.pkg.dev) to stream it, or `pulumi config set {_key(_F.image_streaming)} false` to "
        "say so"
    )


def _price_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    price, shape = settings.price_per_chip_hour, _shape(settings)
    if price is None or shape is None:
        return []
    problem = price_problem(price, shape[2] * shape[1].chips)
    return [] if problem is None else [f"{reading.stated(_F.price_per_chip_hour)} {problem}"]


def _protection_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    """A production stack survives a `pulumi destroy` run against it by mistake: its cluster and
    its checkpoints (bucketForceDestroy defaults to true, for teardown of other stacks)."""
    if not settings.production:
        return []
    unsafe, fixes = [], []
    if settings.deletion_protection is False:
        unsafe.append(f"{_key(_F.deletion_protection)} is false")
        fixes.append(f"`pulumi config set {_key(_F.deletion_protection)} true`")
    if settings.bucket_force_destroy:
        unsafe.append(
            f"{_key(_F.bucket_force_destroy)} is true, so it would delete the bucket with every checkpoint in it"
        )
        fixes.append(f"`pulumi config set {_key(_F.bucket_force_destroy)} false`")
    if not unsafe:
        return []
    return [
        f"{_key(_F.production)} = true but {' and '.join(unsafe)}: a production cluster and its checkpoints must survive "
        f"a `pulumi destroy` run against the wrong stack; run {' and '.join(fixes)}"
    ]


def _dataset_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    """The dataset bucket is another bucket than the checkpoints' (it is mounted read-only, and the
    pods may only read it); its prefix and file cache do nothing without it."""
    problems = []
    bucket, bucket_key = settings.dataset_bucket, reading.key(_F.dataset_bucket)
    if bucket is not None and bucket == settings.bucket_name:
        problems.append(
            f"{reading.stated(_F.dataset_bucket)} is the checkpoint bucket ({reading.key(_F.bucket_name)}): the dataset is "
            "mounted read-only and its bucket granted read-only, while checkpoints are written to theirs; keep "
            f"the training data in a bucket of its own, or leave {reading.key(_F.bucket_name)} unset (the stack names its own)"
        )
    if bucket is None and reading.ok(_F.dataset_bucket):
        for field, what in ((_F.dataset_prefix, "a folder of"), (_F.dataset_file_cache_mib, "a file cache for")):
            if reading.value(field) is None:
                continue
            problems.append(
                f"{reading.stated(field)} does nothing without {bucket_key}: it is {what} the dataset bucket; set "
                f"{bucket_key} (`pulumi config set {bucket_key} <bucket>`), or `pulumi config rm {reading.key(field)}`"
            )
    return problems


def _name_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    """Names built from the settings above, each checked against the rule of the service that
    receives it (only when the settings themselves are valid, so one mistake is one message)."""
    problems = []
    cluster_name, network, mode = settings.cluster_name, settings.network, settings.mode
    if cluster_name is not None:
        problems += _cluster_derived_problems(
            cluster_name,
            dcn_networks=_dcn_networks(settings),
            builds_image=settings.ray_image is None and reading.ok(_F.ray_image),
        )
        dcn_networks = {
            resource_names.dcn_network_name(cluster_name, index) for index in range(_dcn_networks(settings))
        }
        if network in dcn_networks:
            problems.append(
                f"{reading.stated(_F.network)} is one of the DCN networks the stack creates for the TPU "
                f"NICs of cluster {cluster_name!r}; the cluster's primary network must be another one "
                "(for example default)"
            )
    shape = _shape(settings)
    if mode == "standard" and shape is not None:
        chosen, slice_shape, slices = shape
        pool = resource_names.tpu_pool_name(chosen.accelerator.slice_type(slice_shape.topology), slices - 1)
        pool_problems = gcp_names.node_pool_name_problems(pool)
        if pool_problems:
            problems.append(
                _derived_problem(
                    _key(_F.topology),
                    slice_shape.topology,
                    f"the node pool name {pool!r}",
                    "GKE",
                    pool_problems,
                    "use a smaller slice",
                )
            )
    return problems


def _stack_name_problems(stack: str) -> list[str]:
    stack_problems = gcp_names.label_value_problems(stack)
    if not stack_problems:
        return []
    return [
        f"the stack name {stack!r} becomes the cluster's label {STACK_LABEL}={stack}, which GKE "
        f"refuses: it {', '.join(stack_problems)}; use a stack named with {gcp_names.LABEL_VALUE_RULE}"
    ]


def _reservation_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    reservation = settings.reservation
    if reservation is None:
        return []
    if settings.mode == "autopilot" and reservation.startswith("projects/"):
        return [
            f"{reading.stated(_F.reservation)} is a shared reservation's path, which an "
            "Autopilot ComputeClass does not take as a name (it names the owner project apart); use a "
            "reservation of this project, or mode = standard"
        ]
    return []


def _capacity_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    """What the capacity choices need of each other and of the cluster's mode."""
    problems = []
    reservation, mode, slices = settings.reservation, settings.mode, settings.slices
    capacity, min_slices = settings.capacity, settings.min_slices
    capacity_stated = reading.stated(_F.capacity, list(capacity)) if capacity is not None else ""
    if capacity is not None and mode == "standard" and len(capacity) > 1:
        problems.append(
            f"{capacity_stated} is a fallback order, which a Standard cluster "
            "cannot follow: each TPU node pool has one provisioning model; choose one (for example "
            f"`pulumi config set capacity {capacity[0]}`), or use mode = autopilot, whose ComputeClass tries its "
            "choices in order"
        )
    if capacity is not None and RESERVATION in capacity and reservation is None and reading.ok(_F.reservation):
        problems.append(
            f"{capacity_stated} includes reservation, but no reservation is "
            "named; run `pulumi config set reservation <name>`"
        )
    if capacity is not None and reservation is not None and RESERVATION not in capacity:
        problems.append(
            f"{reading.stated(_F.reservation)} does nothing while {capacity_stated} does not include reservation; add it (`pulumi config "
            "set capacity reservation`), or `pulumi config rm reservation`"
        )
    if min_slices is not None and slices is not None and min_slices > slices:
        problems.append(
            f"{reading.stated(_F.min_slices)} is more than the stack's {slices} slice(s); use 0 to {slices}"
        )
    elif capacity is not None and mode == "standard" and FLEX_START in capacity and min_slices:
        problems.append(
            f"{reading.stated(_F.min_slices)} with capacity = flex-start: GKE's flex-start TPU node pools "
            f"start at 0 nodes and get a slice only when a job asks for one; set {reading.key(_F.min_slices)} to 0, "
            "or choose another capacity"
        )
    if (
        min_slices is not None
        and slices is not None
        and min_slices >= slices
        and reading.changed(_F.idle_timeout_seconds)
    ):
        idle, fewest = reading.key(_F.idle_timeout_seconds), reading.key(_F.min_slices)
        problems.append(
            f"{reading.stated(_F.idle_timeout_seconds)} does nothing while {fewest} = slices ({slices}): every "
            f"slice stays up; lower {fewest} (0 scales to zero while idle), or `pulumi config rm {idle}`"
        )
    return problems


def _flex_start_problems(reading: Reading[StackSettings], settings: PartialStackSettings) -> list[str]:
    chosen, mode, capacity, region, zone = (
        settings.preset,
        settings.mode,
        settings.capacity,
        settings.region,
        settings.zone,
    )
    if chosen is None or mode is None or not (region and zone):
        return []
    if capacity is None or FLEX_START not in capacity:
        return []
    return _flex_start_zone_problems(chosen.accelerator.name, mode, region, zone)


def _flex_start_zone_problems(accelerator: str, mode: str, region: str, zone: str) -> list[str]:
    """Flex-start TPUs exist in a few zones only: a pool elsewhere would wait for ever."""
    zones = FLEX_START_ZONES.get(accelerator)
    if zones is None:
        return []  # no list for this generation: not checked (domain/tpu/tpu_catalog.py)
    if mode == "standard" and zone not in zones:
        return [
            f"{_key(_F.zone)} = {zone!r} with capacity = flex-start: GKE offers flex-start TPU {accelerator} only in "
            f"{', '.join(zones)}, so the node pools would never get a slice; use one of those zones, or another "
            f"capacity choice. Zones as listed by {FLEX_START_ZONES_SOURCE}"
        ]
    regions = sorted({zone_region(candidate) for candidate in zones})
    if mode == "autopilot" and region not in regions:
        return [
            f"{_key(_F.region)} = {region!r} with capacity including flex-start: GKE offers flex-start TPU {accelerator} "
            f"only in {', '.join(zones)}, none of them in this region; use {' or '.join(regions)}, or drop "
            f"flex-start from capacity. Zones as listed by {FLEX_START_ZONES_SOURCE}"
        ]
    return []


def _head_machine_problems(machine_type: str, *, autoscales: bool) -> list[str]:
    """The Ray head pod's requests (with the autoscaler's sidecar on a stack that scales) against
    what GKE leaves pods on a node of `machine_type` (domain/gcp/gke.py); a size the name does not say
    is not checked (domain/gcp/machine_types.py)."""
    size = machine_size(machine_type)
    cpus, memory_gib = ray_head.head_pod_cpus(autoscales), ray_head.head_pod_memory_gib(autoscales)
    whose = "the head's and its autoscaler's requests" if autoscales else "the head's request"
    short = []
    if size.vcpus is not None and gke.allocatable_cpu(size.vcpus) < cpus:
        short.append(
            f"{gke.allocatable_cpu(size.vcpus):.2f} allocatable CPUs of its {size.vcpus:g} vCPUs for {whose} of {cpus:g}"
        )
    if size.memory_gib is not None and gke.allocatable_memory_gib(size.memory_gib) < memory_gib:
        short.append(
            f"{gke.allocatable_memory_gib(size.memory_gib):.2f} GiB of allocatable memory of its "
            f"{size.memory_gib:g} GiB for {whose} of {memory_gib:g} GiB"
        )
    if not short:
        return []
    return [
        f"{_key(_F.head_machine_type)} = {machine_type!r} is too small for the Ray head: a GKE node of it offers "
        f"{' and '.join(short)} (GKE keeps the rest for the system), so the head pod would never schedule; use a "
        f"machine type with more, for example {_F.head_machine_type.setting.default} (the default)"
    ]


def _ray_image_problems(stated: str, image: str) -> list[str]:
    """An image that cannot run this product's jobs. Its contents cannot be read before a node
    pulls it, so its name says whether it is a build of trainer/Dockerfile; Ray's own images
    also say which Ray they hold."""
    if is_worker_image(image):
        return []
    version = ray_version_of(image)
    if version is None:
        what = f"is not named as a build of trainer/Dockerfile (its image name is not {WORKER_IMAGE_NAME!r})"
    else:
        what = "is Ray's own image"
    mismatch = ""
    if version is not None and version != RAY_VERSION:
        too_old = (
            f"; {version} also predates token authentication, which the cluster turns on"
            if version_key(version) < version_key(MIN_RAY_VERSION_FOR_TOKEN_AUTH)
            else ""
        )
        mismatch = (
            f", and it holds Ray {version}, but the cluster runs Ray {RAY_VERSION} (the head, every worker and "
            f"the job client need the same Ray{too_old})"
        )
    return [
        f"{stated} {what}: only a build of trainer/Dockerfile has MaxText and this product's trainer "
        f"package, so every job would fail with `No module named ...` once the slices are up{mismatch}; use "
        f"{IMAGE_RULE}"
    ]


def _single_tenant_problems(
    accelerator: Accelerator, mode: str, region: str, zone: str, capacity: tuple[str, ...]
) -> list[str]:
    """Zones the TPU table marks single-tenant offer their TPUs through reservations: on-demand,
    Spot or flex-start nodes there would wait for capacity that is not sold."""
    if RESERVATION in capacity:
        return []
    single_tenant = single_tenant_zones(accelerator.name)
    in_region = [candidate for candidate in accelerator.zones if zone_region(candidate) == region]
    if mode == "standard" and zone in single_tenant:
        where, what = f"{_key(_F.zone)} = {zone!r}", "is"
    elif mode == "autopilot" and in_region and set(in_region) <= set(single_tenant):
        where, what = f"{_key(_F.region)} = {region!r}", f"has only zones ({', '.join(in_region)}) that are"
    else:
        return []
    shared = [candidate for candidate in accelerator.zones if candidate not in single_tenant]
    nearby = [candidate for candidate in shared if zone_region(candidate) == region]
    hint = f" in {region}: {', '.join(nearby)}" if nearby else f": {', '.join(shared)}"
    return [
        f"{where} {what} marked single-tenant for TPU {accelerator.name} in the TPU table (read as capacity for "
        f"single-tenant use, such as a reservation), and capacity = {list(capacity)} has no reservation, so the "
        "TPU nodes would wait for capacity that is not sold there; use a reservation (`pulumi config set capacity "
        f"reservation` and `pulumi config set reservation <name>`), or a zone not marked so{hint}. Zones as "
        f"listed by {TPU_ZONES_SOURCE}"
    ]


def _availability_problems(accelerator: Accelerator, mode: str, region: str, zone: str) -> list[str]:
    """Standard node pools are created in gcp:zone; Autopilot picks a zone of gcp:region."""
    if mode == "standard" and zone not in accelerator.zones:
        in_region = [candidate for candidate in accelerator.zones if candidate.startswith(f"{region}-")]
        hint = (
            f"in {region}: {', '.join(in_region)}"
            if in_region
            else f"(set {_key(_F.region)} to match): {', '.join(accelerator.zones)}"
        )
        return [
            f"{_key(_F.zone)} = {zone!r} does not offer TPU {accelerator.name}; use a zone that does {hint}. "
            f"Zones as listed by {TPU_ZONES_SOURCE}"
        ]
    if mode == "autopilot" and region not in accelerator.regions:
        return [
            f"{_key(_F.region)} = {region!r} has no zone offering TPU {accelerator.name}; use one of: "
            f"{', '.join(accelerator.regions)}. Zones as listed by {TPU_ZONES_SOURCE}"
        ]
    return []


def _mesh_problems(chosen: Preset, topology: str, slices: int) -> list[str]:
    """What a job of the preset would be refused for on this shape (domain/training/job.py's own check),
    so a stack is not built for TPUs its preset cannot use."""

    def job_problems(candidate: str) -> list[str]:
        try:
            resolve_job(
                chosen.name, run_name="settings-check", checkpoint_root="/data", slices=slices, topology=candidate
            )
        except JobError as error:
            return error.problems
        return []

    try:
        problems = job_problems(topology)
        if not problems:
            return []
        fitting = [candidate for candidate in chosen.accelerator.shapes if not job_problems(candidate)]
    except RuntimeError:
        # MaxText (whose base.yml the check reads) is not installed here: the job is still checked
        # before it is submitted.
        return []
    chips = chosen.accelerator.shape(topology).chips
    fix = f"use topology {' or '.join(fitting)}" if fitting else "no topology of this accelerator fits it"
    return [
        f"topology = {topology!r} ({chips} chip{'s' if chips > 1 else ''} per slice, {slices} slice(s)) cannot run preset "
        f"{chosen.name!r}: its MaxText mesh does not fit ({'; '.join(problems)}); {fix}, or a preset "
        "sized for this shape"
    ]


def _cluster_derived_problems(cluster_name: str, *, dcn_networks: int, builds_image: bool) -> list[str]:
    """The names the program derives from clusterName (domain/gcp/resource_names.py), checked."""
    problems = []
    account_id = resource_names.node_service_account_id(cluster_name)
    account_problems = gcp_names.service_account_id_problems(account_id)
    if account_problems:
        problems.append(
            _derived_problem(
                _key(_F.cluster_name),
                cluster_name,
                f"the node service account id {account_id!r}",
                "IAM",
                account_problems,
                f"use at most {resource_names.NODE_SERVICE_ACCOUNT_FULL_NAME_MAX} characters, so that the id is "
                f"the whole name followed by {resource_names.NODE_SERVICE_ACCOUNT_SUFFIX}",
            )
        )
    for index in range(dcn_networks):
        for derived, kind in (
            (resource_names.dcn_network_name(cluster_name, index), "DCN network name"),
            (resource_names.dcn_firewall_name(cluster_name, index), "DCN firewall rule name"),
        ):
            derived_problems = gcp_names.compute_name_problems(derived)
            if derived_problems:
                problems.append(
                    _derived_problem(
                        _key(_F.cluster_name),
                        cluster_name,
                        f"the {kind} {derived!r}",
                        "Compute Engine",
                        derived_problems,
                        f"use a shorter {_key(_F.cluster_name)}",
                    )
                )
    if builds_image:
        repository = resource_names.artifact_repository_id(cluster_name)
        repository_problems = gcp_names.artifact_repository_id_problems(repository)
        if repository_problems:
            problems.append(
                _derived_problem(
                    _key(_F.cluster_name),
                    cluster_name,
                    f"the image repository id {repository!r}",
                    "Artifact Registry",
                    repository_problems,
                    f"use a shorter {_key(_F.cluster_name)}",
                )
            )
    return problems


def settings_cost(settings: StackSettings) -> StackCost:
    """`stack_cost` of a validated infra stack: what its outputs, the README's table and
    benchmarks/idle_cost.py say."""
    return stack_cost(
        accelerator=settings.accelerator,
        region=settings.region,
        capacity=settings.primary_capacity,
        chips_per_slice=settings.slice_shape.chips,
        slices=settings.slices,
        min_slices=settings.min_slices,
        price_override=settings.price_per_chip_hour,
    )
