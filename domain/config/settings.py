"""The infra stack's settings read once from raw stack config into a validated `StackSettings`
(the record, domain/stack_settings.py), with the checks of several settings together: a zone of
the region, the preset's TPUs where the cluster is, capacity choices, names derived from settings.

Every problem is reported at once, each naming the setting, the value and what would be valid,
so a stack with bad config stops before a single resource (and a single TPU hour) is requested.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from typing import Any

from domain.config.raw_config import read
from domain.config.stack_value_rules import (
    cluster_derived_problems,
    derived_problem,
    head_machine_problems,
    key,
    ray_image_problems,
    stack_name_problems,
)
from domain.gcp import dcn, gcp_names, gke, resource_names
from domain.gcp.images import (
    WORKER_IMAGE_NAME,
    in_artifact_registry,
    is_worker_image,
    registry_of,
)
from domain.perf.capacity import StackCost, price_problem, stack_cost
from domain.problems import ProblemsError
from domain.setting import Field, Partial, Reading
from domain.stack_settings import StackSettings
from domain.tpu.capacity_choices import FLEX_START, RESERVATION, SPOT
from domain.tpu.tpu_catalog import (
    FLEX_START_ZONES,
    FLEX_START_ZONES_SOURCE,
    TPU_ZONES_SOURCE,
    Accelerator,
    SliceShape,
    single_tenant_zones,
    zone_region,
)
from domain.training.job import JobError, resolve_job, topology_problem
from domain.training.presets import PRESETS, Preset

# A zone is its region plus a letter (`us-east5-b`), or an AI zone's `ai<N><letter>` (`us-south1-ai1b`).
_ZONE_SUFFIX = re.compile(r"[a-z]|ai\d+[a-z]")

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
    reading.problems += stack_name_problems(stack)

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
        problems += head_machine_problems(machine_type, autoscales=autoscales)
    if settings.ray_image:
        problems += ray_image_problems(reading.stated(_F.ray_image), settings.ray_image)
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
        f"{key(_F.ray_image)} = {image!r} is in {registry_of(image) or 'Docker Hub'}, not Artifact Registry, so "
        "GKE cannot stream it: the node pools are created without image streaming and every new node pulls "
        "the whole image before its first pod starts. Push the image to Artifact Registry "
        f"(LOCATION-docker.pkg.dev) to stream it, or `pulumi config set {key(_F.image_streaming)} false` to "
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
        unsafe.append(f"{key(_F.deletion_protection)} is false")
        fixes.append(f"`pulumi config set {key(_F.deletion_protection)} true`")
    if settings.bucket_force_destroy:
        unsafe.append(
            f"{key(_F.bucket_force_destroy)} is true, so it would delete the bucket with every checkpoint in it"
        )
        fixes.append(f"`pulumi config set {key(_F.bucket_force_destroy)} false`")
    if not unsafe:
        return []
    return [
        f"{key(_F.production)} = true but {' and '.join(unsafe)}: a production cluster and its checkpoints must survive "
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
        problems += cluster_derived_problems(
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
                derived_problem(
                    key(_F.topology),
                    slice_shape.topology,
                    f"the node pool name {pool!r}",
                    "GKE",
                    pool_problems,
                    "use a smaller slice",
                )
            )
    return problems


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
            f"{key(_F.zone)} = {zone!r} with capacity = flex-start: GKE offers flex-start TPU {accelerator} only in "
            f"{', '.join(zones)}, so the node pools would never get a slice; use one of those zones, or another "
            f"capacity choice. Zones as listed by {FLEX_START_ZONES_SOURCE}"
        ]
    regions = sorted({zone_region(candidate) for candidate in zones})
    if mode == "autopilot" and region not in regions:
        return [
            f"{key(_F.region)} = {region!r} with capacity including flex-start: GKE offers flex-start TPU {accelerator} "
            f"only in {', '.join(zones)}, none of them in this region; use {' or '.join(regions)}, or drop "
            f"flex-start from capacity. Zones as listed by {FLEX_START_ZONES_SOURCE}"
        ]
    return []


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
        where, what = f"{key(_F.zone)} = {zone!r}", "is"
    elif mode == "autopilot" and in_region and set(in_region) <= set(single_tenant):
        where, what = f"{key(_F.region)} = {region!r}", f"has only zones ({', '.join(in_region)}) that are"
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
            else f"(set {key(_F.region)} to match): {', '.join(accelerator.zones)}"
        )
        return [
            f"{key(_F.zone)} = {zone!r} does not offer TPU {accelerator.name}; use a zone that does {hint}. "
            f"Zones as listed by {TPU_ZONES_SOURCE}"
        ]
    if mode == "autopilot" and region not in accelerator.regions:
        return [
            f"{key(_F.region)} = {region!r} has no zone offering TPU {accelerator.name}; use one of: "
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
