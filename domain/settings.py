"""The infra stack's settings: parsed once from raw stack config into a frozen, validated object.

Every problem is reported at once, each naming the setting, the value and what would be valid,
so a stack with bad config stops before a single resource (and a single TPU hour) is requested.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

from domain import dcn, gcp_names, gke, resource_names
from domain.images import IMAGE_RULE, image_reference_problems
from domain.job import JobError, resolve_job
from domain.presets import PRESETS, Preset
from domain.problems import ProblemsError
from domain.tpu_catalog import TPU_ZONES_SOURCE, Accelerator, SliceShape

MAX_SLICES = 64

# Project settings (stack config keys without a namespace) and their defaults. `gcp:project`,
# `gcp:region` and `gcp:zone` are read from the Google provider's own namespace.
DEFAULTS: Mapping[str, Any] = {
    "preset": "llama3-8b",
    "mode": "standard",
    "clusterName": "maxtext-tpu",
    "gkeVersion": gke.DEFAULT_VERSION,
    "releaseChannel": "RAPID",
    "network": "default",
    "slices": None,  # the preset's
    "topology": None,  # the preset's
    "spot": False,
    "reservation": None,
    "dcnSubnets": list(dcn.DEFAULT_SUBNET_RANGES),
    "namespace": "default",
    "serviceAccount": "maxtext-ray",
    "bucketName": None,  # Pulumi auto-names it (a random suffix keeps it globally unique)
    "bucketForceDestroy": True,
    "deletionProtection": False,
    "production": False,
    "rayImage": None,  # the stack builds the worker image (domain/worker_image.py)
    "headMachineType": "n1-standard-16",
    "pricePerChipHour": None,  # the catalog's on-demand list price for the accelerator
}

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
# A zone is its region plus a letter (`us-east5-b`), or an AI zone's `ai<N><letter>` (`us-south1-ai1b`).
_ZONE_SUFFIX = re.compile(r"^(?:[a-z]|ai\d+[a-z])$")

# The setting names a message uses for the Google provider's keys, which `raw` carries bare.
_GCP_KEYS = {"project": "gcp:project", "region": "gcp:region", "zone": "gcp:zone"}

# Where each setting's value ends up unencrypted. The program reads every setting as a plain value
# (a secret's encryption does not survive `Config.get`), so a value set with
# `pulumi config set --secret` would be copied into these places in clear; the stack refuses it.
IN_CLEAR: Mapping[str, str] = {
    "project": "it is part of the clusterId and kubeconfig outputs, the Workload Identity pool and the image URL",
    "region": "it is the clusterLocation output of an Autopilot stack, the bucket's location and part of the image URL",
    "zone": "it is the clusterLocation output of a Standard stack and the node pools' location",
    "preset": "it is exported as the preset output",
    "mode": "it is exported as the mode output",
    "clusterName": "it names the GKE cluster (the clusterName output), its node service account, DCN networks and image repository",
    "gkeVersion": "it is the cluster's minimum version, stored unencrypted in the stack's state",
    "releaseChannel": "it is the cluster's release channel, stored unencrypted in the stack's state",
    "network": "it is the cluster's network, stored unencrypted in the stack's state",
    "slices": "it is exported as the slices output and numbers the TPU node pools",
    "topology": "it is exported as the topology output and names the TPU node pools",
    "spot": "it is a node pool setting, stored unencrypted in the stack's state",
    "reservation": "it is the TPU node pools' reservation affinity, stored unencrypted in the stack's state",
    "dcnSubnets": "they are the DCN subnets' ranges, stored unencrypted in the stack's state",
    "namespace": "it is exported as the namespace output and names the Kubernetes objects' namespace",
    "serviceAccount": "it is exported as the serviceAccount output and is part of the bucket's IAM member",
    "bucketName": "it is exported as the bucketName and checkpointBucketUrl outputs",
    "bucketForceDestroy": "it is the bucket's force_destroy, stored unencrypted in the stack's state",
    "deletionProtection": "it is the cluster's deletion_protection, stored unencrypted in the stack's state",
    "production": "it becomes the cluster's environment label",
    "rayImage": "it is exported as the rayImage output and set on every Ray pod",
    "headMachineType": "it is the head pool's machine type, stored unencrypted in the stack's state",
    "pricePerChipHour": "it is exported as the pricePerChipHourUsd and onDemandDollarsPerHour outputs",
}

# Namespaces every cluster already has: the stack creates its namespace, which would fail.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
# The label that records the stack on the cluster (domain/gcp_resources.py).
STACK_LABEL = "maxtext-tpu-stack"


class SettingsError(ProblemsError):
    """Stack config that cannot be deployed."""

    heading = "invalid stack configuration"


@dataclass(frozen=True)
class StackSettings:
    """Everything the infra program needs to know, validated."""

    stack: str
    project: str
    region: str
    zone: str
    preset: Preset
    mode: str
    cluster_name: str
    gke_version: str
    release_channel: str
    network: str
    topology: str
    slices: int
    spot: bool
    reservation: str | None
    dcn_subnets: tuple[str, ...]
    namespace: str
    service_account: str
    bucket_name: str | None
    bucket_force_destroy: bool
    deletion_protection: bool
    production: bool
    # An image to use as-is; None: the stack builds its own worker image and uses that.
    ray_image: str | None
    head_machine_type: str
    price_per_chip_hour_usd: float | None = None  # None: the catalog's list price

    @property
    def accelerator(self) -> Accelerator:
        return self.preset.accelerator

    @property
    def slice_shape(self) -> SliceShape:
        return self.accelerator.shape(self.topology)

    @property
    def chip_hour_price(self) -> float:
        if self.price_per_chip_hour_usd is not None:
            return self.price_per_chip_hour_usd
        return self.accelerator.price_per_chip_hour_usd

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
    def uses_dcn_networks(self) -> bool:
        """Standard clusters attach extra VPCs to TPU pools; Autopilot manages them itself."""
        return not self.is_autopilot and self.accelerator.dcn_networks > 0


class _Reader:
    """Reads raw config values (strings, as the Pulumi engine passes them) and collects problems."""

    def __init__(self, raw: Mapping[str, Any]):
        self.raw = raw
        self.problems: list[str] = []

    def value(self, key: str) -> Any:
        value = self.raw.get(key)
        return DEFAULTS.get(key) if value is None else value

    def text(self, key: str) -> str | None:
        value = self.value(key)
        return None if value is None else str(value)

    def choice(self, key: str, valid: tuple[str, ...] | list[str]) -> str | None:
        value = self.text(key)
        if value not in valid:
            self.problems.append(f"{key} = {value!r} is not valid; choose one of: {', '.join(valid)}")
            return None
        return value

    def boolean(self, key: str) -> bool:
        value = self.value(key)
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
        self.problems.append(f"{key} = {value!r} is not a boolean; use true or false")
        return bool(DEFAULTS[key])

    def positive_number(self, key: str) -> float | None:
        value = self.value(key)
        if value is None:
            return None
        try:
            number = float(str(value))
        except ValueError:
            number = -1.0
        if number <= 0:
            self.problems.append(f"{key} = {value!r} is not a positive number (US dollars)")
            return None
        return number

    def integer(self, key: str) -> int | None:
        value = self.value(key)
        if value is None:
            return None
        try:
            return int(str(value))
        except ValueError:
            self.problems.append(f"{key} = {value!r} is not a whole number")
            return None

    def string_list(self, key: str) -> tuple[str, ...]:
        value = self.value(key)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.problems.append(f"{key} = {value!r} is not a list of strings")
            return ()
        return tuple(value)

    def dns_label(self, key: str, max_length: int) -> str:
        value = self.text(key) or ""
        if len(value) > max_length or not _DNS_LABEL.match(value):
            reasons = gcp_names.rfc1035_problems(value, max_length=max_length)
            self.problems.append(
                f"{key} = {value!r} is not valid; use lowercase letters, digits and '-', "
                f"starting with a letter, at most {max_length} characters: it {', '.join(reasons)}"
            )
        return value

    def name(self, key: str, what: str, problems: list[str], rule: str, *, label: str | None = None) -> None:
        """Records the `problems` of `key`'s value (from domain/gcp_names.py) as one message."""
        if problems:
            value = self.text(key)
            self.problems.append(f"{label or key} = {value!r} is not {what}: it {', '.join(problems)}; use {rule}")


def _derived_problem(key: str, value: str, derived: str, service: str, problems: list[str], fix: str) -> str:
    """A name the program builds from a setting, refused by the service that gets it."""
    return f"{key} = {value!r} makes {derived}, which {service} refuses: it {', '.join(problems)}; {fix}"


def parse_settings(
    raw: Mapping[str, Any], *, stack: str, project_name: str, secret_keys: Set[str] = frozenset()
) -> StackSettings:
    """Validates raw stack config (`project_name:key` keys already stripped to `key`).

    `raw` also carries `project`, `region` and `zone` from the Google provider's config.
    `secret_keys` names the keys of `raw` that were set with `pulumi config set --secret`. Raises
    SettingsError listing every problem when anything is wrong.
    """
    reader = _Reader(raw)
    problems = reader.problems

    unknown = sorted(set(raw) - set(DEFAULTS) - {"project", "region", "zone"})
    for key in unknown:
        problems.append(f"{project_name}:{key} is not a setting of this project; valid settings: {', '.join(DEFAULTS)}")
    for key in sorted(set(secret_keys) & set(IN_CLEAR)):
        shown = _GCP_KEYS.get(key, key)
        problems.append(
            f"{shown} is set as a secret, but {IN_CLEAR[key]}, where it would appear in clear; set it "
            f"without --secret (`pulumi config set {shown} VALUE`), or keep the value out of this stack"
        )

    project = reader.text("project") or ""
    region = reader.text("region") or ""
    zone = reader.text("zone") or ""
    if not project:
        problems.append("gcp:project is not set; run `pulumi config set gcp:project <project-id>`")
    else:
        reader.name(
            "project",
            "a project ID",
            gcp_names.project_id_problems(project),
            gcp_names.PROJECT_ID_RULE,
            label="gcp:project",
        )
    region_ok = bool(_REGION.match(region))
    if not region_ok:
        problems.append(
            f"gcp:region = {region!r} is not a Google Cloud region (for example us-east5); "
            "run `pulumi config set gcp:region <region>`"
        )
    zone_ok = zone.startswith(f"{region}-") and bool(_ZONE_SUFFIX.match(zone[len(region) + 1 :]))
    if not zone_ok:
        problems.append(
            f"gcp:zone = {zone!r} is not a zone of region {region!r}; use {region}-a, "
            f"{region}-b, ... (one with capacity for the preset's TPUs)"
        )

    preset_name = reader.choice("preset", list(PRESETS))
    chosen = PRESETS[preset_name] if preset_name else None
    if chosen is not None and not chosen.runs_on_tpu:
        problems.append(
            f"preset = {chosen.name!r} runs on CPU through a local Ray cluster, not on GKE; "
            f"choose a TPU preset: {', '.join(p.name for p in PRESETS.values() if p.runs_on_tpu)}"
        )
        chosen = None

    mode = reader.choice("mode", gke.MODES)
    topology = reader.text("topology") or (chosen.topology if chosen else None) or ""
    topology_ok = chosen is not None and topology in chosen.accelerator.shapes
    if chosen is not None and not topology_ok:
        problems.append(
            f"topology = {topology!r} is not a topology of TPU {chosen.accelerator.name}; valid "
            f"topologies: {', '.join(chosen.accelerator.shapes)}"
        )
    slices = reader.integer("slices")
    if slices is None and chosen is not None:
        slices = chosen.slices
    slices_ok = slices is not None and 1 <= slices <= MAX_SLICES
    if slices is not None and not slices_ok:
        problems.append(f"slices = {slices} is out of range; use 1 to {MAX_SLICES}")

    # Where the TPUs are: Standard pools live in gcp:zone; Autopilot picks a zone of gcp:region.
    if chosen is not None and mode is not None and region_ok and zone_ok:
        problems += _availability_problems(chosen.accelerator, mode, region, zone)
    # The preset's MaxText mesh, exactly as a job on this cluster would be checked.
    if chosen is not None and topology_ok and slices_ok and slices is not None:
        problems += _mesh_problems(chosen, topology, slices)

    gke_version = reader.text("gkeVersion") or ""
    try:
        if mode is not None and not gke.supports_dranet(gke_version, mode):
            problems.append(
                f"gkeVersion = {gke_version!r} is below the managed DRANET minimum for {mode} "
                f"clusters; use {gke.DRANET_MINIMUM_VERSION[mode]} or later"
            )
    except ValueError as error:
        problems.append(f"gkeVersion: {error}")
    release_channel = reader.choice("releaseChannel", gke.RELEASE_CHANNELS)

    dcn_subnets = reader.string_list("dcnSubnets")
    for problem in dcn.subnet_range_problems(dcn_subnets):
        problems.append(f"dcnSubnets: {problem}; use non-overlapping private ranges")
    needed_networks = chosen.accelerator.dcn_networks if chosen else 0
    if mode == "standard" and chosen is not None and len(dcn_subnets) != needed_networks:
        problems.append(
            f"dcnSubnets has {len(dcn_subnets)} ranges but TPU "
            f"{chosen.accelerator.name if chosen else '?'} needs {needed_networks} DCN networks; "
            f"give exactly {needed_networks} (default: {', '.join(dcn.DEFAULT_SUBNET_RANGES)})"
        )

    spot = reader.boolean("spot")
    reservation = reader.text("reservation")
    if reservation is not None:
        reader.name(
            "reservation", "a reservation name", gcp_names.reservation_problems(reservation), gcp_names.RESERVATION_RULE
        )
        if mode == "autopilot" and reservation.startswith("projects/"):
            problems.append(
                f"reservation = {reservation!r} is a shared reservation's path, which an Autopilot "
                "ComputeClass does not take as a name (it names the owner project apart); use a "
                "reservation of this project, or mode = standard"
            )
        if spot:
            problems.append(
                f"spot = true and reservation = {reservation!r} together: Compute Engine does not let Spot "
                "VMs consume reservations, so the TPU nodes would never start; choose one (unset "
                "reservation, or set spot to false)"
            )

    cluster_name = reader.dns_label("clusterName", gcp_names.GKE_CLUSTER_NAME_MAX)
    namespace = reader.dns_label("namespace", 63)
    service_account = reader.dns_label("serviceAccount", 63)
    if namespace in SYSTEM_NAMESPACES:
        problems.append(
            f"namespace = {namespace!r} is a namespace every cluster already has; the stack creates "
            "its namespace, which would fail; use a namespace of its own (or default)"
        )
    if service_account == "default":
        problems.append(
            "serviceAccount = 'default' is the account Kubernetes creates in every namespace; the "
            "stack creates its own Ray service account, which would fail; use another name (for "
            "example maxtext-ray)"
        )
    network = reader.text("network") or ""
    reader.name("network", "a VPC network name", gcp_names.network_name_problems(network), gcp_names.NETWORK_RULE)
    bucket_name = reader.text("bucketName")
    if bucket_name is not None:
        reader.name(
            "bucketName",
            "a Cloud Storage bucket name",
            gcp_names.bucket_name_problems(bucket_name),
            gcp_names.BUCKET_NAME_RULE,
        )
    bucket_force_destroy = reader.boolean("bucketForceDestroy")
    deletion_protection = reader.boolean("deletionProtection")
    production = reader.boolean("production")
    if production and not deletion_protection:
        problems.append(
            "production = true but deletionProtection is false: a production cluster must survive a "
            "`pulumi destroy` run against the wrong stack; run `pulumi config set deletionProtection true`"
        )
    head_machine_type = reader.text("headMachineType") or ""
    reader.name(
        "headMachineType",
        "a machine type",
        gcp_names.machine_type_problems(head_machine_type),
        gcp_names.MACHINE_TYPE_RULE,
    )
    price_per_chip_hour_usd = reader.positive_number("pricePerChipHour")
    image = reader.text("rayImage")
    if image is not None:
        reader.name("rayImage", "a pinned container image", image_reference_problems(image), IMAGE_RULE)

    # Names built from the settings above, each checked against the rule of the service that
    # receives it (only when the settings themselves are valid, so one mistake is one message).
    if _DNS_LABEL.match(cluster_name) and len(cluster_name) <= gcp_names.GKE_CLUSTER_NAME_MAX:
        problems += _cluster_derived_problems(
            cluster_name,
            dcn_networks=needed_networks if mode == "standard" else 0,
            builds_image=image is None,
        )
        if (
            mode == "standard"
            and needed_networks
            and network in {resource_names.dcn_network_name(cluster_name, index) for index in range(needed_networks)}
        ):
            problems.append(
                f"network = {network!r} is one of the DCN networks the stack creates for the TPU "
                f"NICs of cluster {cluster_name!r}; the cluster's primary network must be another one "
                "(for example default)"
            )
    if mode == "standard" and chosen is not None and topology_ok and slices_ok and slices is not None:
        pool = resource_names.tpu_pool_name(chosen.accelerator.slice_type(topology), slices - 1)
        pool_problems = gcp_names.node_pool_name_problems(pool)
        if pool_problems:
            problems.append(
                _derived_problem(
                    "topology", topology, f"the node pool name {pool!r}", "GKE", pool_problems, "use a smaller slice"
                )
            )
    stack_problems = gcp_names.label_value_problems(stack)
    if stack_problems:
        problems.append(
            f"the stack name {stack!r} becomes the cluster's label {STACK_LABEL}={stack}, which GKE "
            f"refuses: it {', '.join(stack_problems)}; use a stack named with {gcp_names.LABEL_VALUE_RULE}"
        )

    if problems:
        # The refusal of a secret setting does not repeat its value, nor may any other message.
        hidden = [str(raw[key]) for key in secret_keys if key in raw and raw[key] not in (None, "")]
        raise SettingsError([_redacted(problem, hidden) for problem in problems])
    assert chosen is not None and mode is not None and slices is not None
    assert release_channel is not None
    return StackSettings(
        stack=stack,
        project=project,
        region=region,
        zone=zone,
        preset=chosen,
        mode=mode,
        gke_version=gke_version,
        release_channel=release_channel,
        topology=topology,
        slices=slices,
        spot=spot,
        reservation=reservation,
        dcn_subnets=dcn_subnets,
        cluster_name=cluster_name,
        namespace=namespace,
        service_account=service_account,
        network=network,
        bucket_name=bucket_name,
        bucket_force_destroy=bucket_force_destroy,
        deletion_protection=deletion_protection,
        production=production,
        ray_image=image,
        head_machine_type=head_machine_type,
        price_per_chip_hour_usd=price_per_chip_hour_usd,
    )


def _availability_problems(accelerator: Accelerator, mode: str, region: str, zone: str) -> list[str]:
    """Standard node pools are created in gcp:zone; Autopilot picks a zone of gcp:region."""
    if mode == "standard" and zone not in accelerator.zones:
        in_region = [candidate for candidate in accelerator.zones if candidate.startswith(f"{region}-")]
        hint = (
            f"in {region}: {', '.join(in_region)}"
            if in_region
            else f"(set gcp:region to match): {', '.join(accelerator.zones)}"
        )
        return [
            f"gcp:zone = {zone!r} does not offer TPU {accelerator.name}; use a zone that does {hint}. "
            f"Zones as listed by {TPU_ZONES_SOURCE}"
        ]
    if mode == "autopilot" and region not in accelerator.regions:
        return [
            f"gcp:region = {region!r} has no zone offering TPU {accelerator.name}; use one of: "
            f"{', '.join(accelerator.regions)}. Zones as listed by {TPU_ZONES_SOURCE}"
        ]
    return []


def _mesh_problems(chosen: Preset, topology: str, slices: int) -> list[str]:
    """What a job of the preset would be refused for on this shape (domain/job.py's own check),
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
    """The names the program derives from clusterName (domain/resource_names.py), checked."""
    problems = []
    account_id = resource_names.node_service_account_id(cluster_name)
    account_problems = gcp_names.service_account_id_problems(account_id)
    if account_problems:
        problems.append(
            _derived_problem(
                "clusterName",
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
                        "clusterName",
                        cluster_name,
                        f"the {kind} {derived!r}",
                        "Compute Engine",
                        derived_problems,
                        "use a shorter clusterName",
                    )
                )
    if builds_image:
        repository = resource_names.artifact_repository_id(cluster_name)
        repository_problems = gcp_names.artifact_repository_id_problems(repository)
        if repository_problems:
            problems.append(
                _derived_problem(
                    "clusterName",
                    cluster_name,
                    f"the image repository id {repository!r}",
                    "Artifact Registry",
                    repository_problems,
                    "use a shorter clusterName",
                )
            )
    return problems


def _redacted(problem: str, secrets: list[str]) -> str:
    """Messages quote values (`'value'`); a few print them bare (numbers, booleans, and names
    inside longer names), which are hidden too unless too short to tell from other words."""
    for secret in sorted(secrets, key=len, reverse=True):
        problem = problem.replace(repr(secret), "'[secret]'")
        if len(secret) >= 4:
            problem = problem.replace(secret, "[secret]")
    return problem
