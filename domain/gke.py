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
# Spot stack set it (domain/preemption.py).
SPOT_SHUTDOWN_GRACE_MINIMUM_VERSION = "1.35.0-gke.1171000"

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)-gke\.(\d+)$")


def parse_version(version: str) -> tuple[int, int, int, int]:
    """`1.35.2-gke.1842000` -> (1, 35, 2, 1842000), comparable with `<`."""
    match = _VERSION.match(version)
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
