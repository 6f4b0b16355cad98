"""GKE facts the procedure depends on: cluster modes, the versions that have managed DRANET, and
the version from which a Standard node pool's Spot shutdown grace period can be set."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

MODES = ("standard", "autopilot")

# Managed DRANET (the netdev.google.com device class) needs at least these control-plane versions.
DRANET_MINIMUM_VERSION: Mapping[str, str] = MappingProxyType(
    {"autopilot": "1.35.2-gke.1842000", "standard": "1.34.1-gke.1829001"}
)

# The version the procedure was written and tested against; it satisfies both minimums.
DEFAULT_VERSION = "1.35.2-gke.1842000"

RELEASE_CHANNELS = ("RAPID", "REGULAR", "STABLE", "EXTENDED")

# A Standard node pool's kubelet takes `shutdownGracePeriodSeconds` (and its critical-pods share)
# on Spot VMs from this control-plane version on (GKE's Spot VMs concept page); the TPU pools of a
# Spot stack set it (domain/ray/preemption.py).
SPOT_SHUTDOWN_GRACE_MINIMUM_VERSION = "1.35.0-gke.1171000"

# Image streaming (a node pool's `gcfsConfig`) needs nodes of Container-Optimized OS with
# containerd, the image type the stack's pools then name; GKE's "Use Image streaming to pull
# container images" page.
STREAMING_NODE_IMAGE_TYPE = "COS_CONTAINERD"

# A Standard node pool takes a secondary boot disk (GKE's container image cache) from this version
# on (GKE's "Use secondary boot disks to preload data or container images" page; Autopilot from
# 1.30.1-gke.1329000, through other means than a node pool: the stack refuses the setting there).
SECONDARY_BOOT_DISK_MINIMUM_VERSION = "1.28.3-gke.1067000"
SECONDARY_BOOT_DISK_MODE = "CONTAINER_IMAGE_CACHE"

# Whole matches only (a trailing line break is not a version); numbers of at most 9 digits, so a
# long one is refused here, not by Python's limit on converting digits.
_VERSION = re.compile(r"(\d{1,9})\.(\d{1,9})\.(\d{1,9})-gke\.(\d{1,9})")


def parse_version(version: str) -> tuple[int, int, int, int]:
    """`1.35.2-gke.1842000` -> (1, 35, 2, 1842000), comparable with `<`."""
    match = _VERSION.fullmatch(version)
    if match is None:
        raise ValueError(
            f"GKE version {version!r} is not of the form MAJOR.MINOR.PATCH-gke.BUILD (for example {DEFAULT_VERSION})"
        )
    major, minor, patch, build = (int(part) for part in match.groups())
    return major, minor, patch, build


def supports_dranet(version: str, mode: str) -> bool:
    return parse_version(version) >= parse_version(DRANET_MINIMUM_VERSION[mode])


def supports_spot_shutdown_grace(version: str) -> bool:
    return parse_version(version) >= parse_version(SPOT_SHUTDOWN_GRACE_MINIMUM_VERSION)


def supports_secondary_boot_disk(version: str) -> bool:
    return parse_version(version) >= parse_version(SECONDARY_BOOT_DISK_MINIMUM_VERSION)


# What a Standard node keeps for the kubelet, the container runtime and the OS, so what pods can
# request ("allocatable"): GKE's documented reservations, from
# https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_and_cpu_reservations
# (as restated, with these same bands, by the public tools built on that page). DaemonSets (the
# logging and metadata agents, the GCS FUSE sidecar of the head pod) take a little more, so a pod
# that fits here can still wait; one that does not fit here never schedules.
# CPU: (up to this many cores, this fraction of each core in the band).
CPU_RESERVATION_BANDS: tuple[tuple[float, float], ...] = ((1, 0.06), (2, 0.01), (4, 0.005), (float("inf"), 0.0025))
# Memory: 255 MiB on machines with less than 1 GiB; otherwise (up to this many GiB, this fraction).
SMALL_MACHINE_MEMORY_GIB = 1.0
SMALL_MACHINE_RESERVED_GIB = 255 / 1024
MEMORY_RESERVATION_BANDS: tuple[tuple[float, float], ...] = (
    (4, 0.25),
    (8, 0.20),
    (16, 0.10),
    (128, 0.06),
    (float("inf"), 0.02),
)
EVICTION_THRESHOLD_GIB = 100 / 1024  # the kubelet's hard eviction threshold


def _reserved(total: float, bands: tuple[tuple[float, float], ...]) -> float:
    reserved, floor = 0.0, 0.0
    for ceiling, fraction in bands:
        if total <= floor:
            break
        reserved += (min(total, ceiling) - floor) * fraction
        floor = ceiling
    return reserved


def allocatable_cpu(vcpus: float) -> float:
    """CPUs pods can request on a Standard node of `vcpus` vCPUs (an 8-vCPU node: 7.91)."""
    return vcpus - _reserved(vcpus, CPU_RESERVATION_BANDS)


def allocatable_memory_gib(memory_gib: float) -> float:
    """GiB of memory pods can request on a Standard node with `memory_gib` GiB."""
    if memory_gib < SMALL_MACHINE_MEMORY_GIB:
        return memory_gib - SMALL_MACHINE_RESERVED_GIB - EVICTION_THRESHOLD_GIB
    return memory_gib - _reserved(memory_gib, MEMORY_RESERVATION_BANDS) - EVICTION_THRESHOLD_GIB
