"""The infra stack's settings: parsed once from raw stack config into a frozen, validated object.

Every problem is reported at once, each naming the setting, the value and what would be valid,
so a stack with bad config stops before a single resource (and a single TPU hour) is requested.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain import dcn, gke
from domain.presets import PRESETS, Preset
from domain.problems import ProblemsError
from domain.ray_version import RAY_VERSION
from domain.tpu_catalog import Accelerator, SliceShape

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
            self.problems.append(
                f"{key} = {value!r} is not valid; use lowercase letters, digits and '-', "
                f"starting with a letter, at most {max_length} characters"
            )
        return value


def parse_settings(raw: Mapping[str, Any], *, stack: str, project_name: str) -> StackSettings:
    """Validates raw stack config (`project_name:key` keys already stripped to `key`).

    `raw` also carries `project`, `region` and `zone` from the Google provider's config. Raises
    SettingsError listing every problem when anything is wrong.
    """
    reader = _Reader(raw)
    problems = reader.problems

    unknown = sorted(set(raw) - set(DEFAULTS) - {"project", "region", "zone"})
    for key in unknown:
        problems.append(f"{project_name}:{key} is not a setting of this project; valid settings: {', '.join(DEFAULTS)}")

    project = reader.text("project") or ""
    region = reader.text("region") or ""
    zone = reader.text("zone") or ""
    if not project:
        problems.append("gcp:project is not set; run `pulumi config set gcp:project <project-id>`")
    if not _REGION.match(region):
        problems.append(
            f"gcp:region = {region!r} is not a Google Cloud region (for example us-east5); "
            "run `pulumi config set gcp:region <region>`"
        )
    if not zone.startswith(f"{region}-") or len(zone) != len(region) + 2:
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
    if chosen is not None and topology not in chosen.accelerator.shapes:
        problems.append(
            f"topology = {topology!r} is not a topology of TPU {chosen.accelerator.name}; valid "
            f"topologies: {', '.join(chosen.accelerator.shapes)}"
        )
    slices = reader.integer("slices")
    if slices is None and chosen is not None:
        slices = chosen.slices
    if slices is not None and not 1 <= slices <= MAX_SLICES:
        problems.append(f"slices = {slices} is out of range; use 1 to {MAX_SLICES}")

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
    if mode == "standard" and len(dcn_subnets) != needed_networks:
        problems.append(
            f"dcnSubnets has {len(dcn_subnets)} ranges but TPU "
            f"{chosen.accelerator.name if chosen else '?'} needs {needed_networks} DCN networks; "
            f"give exactly {needed_networks} (default: {', '.join(dcn.DEFAULT_SUBNET_RANGES)})"
        )

    spot = reader.boolean("spot")
    reservation = reader.text("reservation")

    cluster_name = reader.dns_label("clusterName", 40)
    namespace = reader.dns_label("namespace", 63)
    service_account = reader.dns_label("serviceAccount", 63)
    network = reader.text("network") or ""
    bucket_name = reader.text("bucketName")
    bucket_force_destroy = reader.boolean("bucketForceDestroy")
    deletion_protection = reader.boolean("deletionProtection")
    production = reader.boolean("production")
    head_machine_type = reader.text("headMachineType") or ""
    price_per_chip_hour_usd = reader.positive_number("pricePerChipHour")
    image = reader.text("rayImage")
    if image is not None and ":" not in image.rsplit("/", 1)[-1] and "@sha256:" not in image:
        problems.append(
            f"rayImage = {image!r} has no tag; pin a version (for example "
            f"rayproject/ray:{RAY_VERSION}-py312-tpu, or IMAGE@sha256:DIGEST), or unset it to "
            "build the worker image"
        )

    if problems:
        raise SettingsError(problems)
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
