"""What a Compute Engine machine type's name says about its size: vCPUs, and memory where the
family fixes it per vCPU. Used to check that the Ray head's node can hold the head pod before
anything is created.

Predefined types are SERIES-FAMILY-VCPUS, custom ones [SERIES-]custom-VCPUS-MEMORY_MB (sources:
docs/deploying.md, "The head's node"). Compute Engine's "GB" of memory are GiB.

What the name cannot say is left unknown (None), and not checked: the vCPUs of accelerator
types (a2-highgpu-1g counts GPUs, ct6e-standard-4t TPU chips) and the memory of families not in
`MEMORY_GIB_PER_VCPU` (m1, m2, x4, ...): GKE then schedules, or leaves the head pending.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# GiB of memory per vCPU of the predefined families whose ratio is fixed.
MEMORY_GIB_PER_VCPU: Mapping[str, float] = MappingProxyType(
    {
        "n1-standard": 3.75,
        "n1-highmem": 6.5,
        "n1-highcpu": 0.9,
        **{f"{series}-standard": 4.0 for series in ("n2", "n2d", "e2", "c2", "c2d", "c3", "c3d", "n4", "t2d")},
        **{f"{series}-highmem": 8.0 for series in ("n2", "n2d", "e2", "c2d", "c3", "c3d", "n4")},
        **{f"{series}-highcpu": 1.0 for series in ("n2", "n2d", "e2")},
        **{f"{series}-highcpu": 2.0 for series in ("c2d", "c3", "c3d", "n4")},
    }
)
# Shared-core types (e2-micro, e2-small, e2-medium, f1-micro, g1-small, e2-custom-medium-...)
# share at most 2 vCPUs (the e2 ones burst to 2), so this is the most a node of them offers.
SHARED_CORE_VCPUS = 2.0
_SHARED_CORE_MEMORY_GIB: Mapping[str, float] = MappingProxyType(
    {"e2-micro": 1.0, "e2-small": 2.0, "e2-medium": 4.0, "f1-micro": 0.6, "g1-small": 1.7}
)

_PREDEFINED = re.compile(r"(?P<family>[a-z][a-z0-9]*-[a-z]+)-(?P<vcpus>\d{1,5})(?:-[a-z]+){0,2}")
_CUSTOM = re.compile(r"(?:[a-z][a-z0-9]*-)?custom-(?P<vcpus>\d{1,5}|micro|small|medium)-(?P<mb>\d{1,9})(?:-ext)?")


@dataclass(frozen=True)
class MachineSize:
    vcpus: float | None  # None: the name does not say
    memory_gib: float | None  # None: the name does not say


def machine_size(machine_type: str) -> MachineSize:
    """The size a (valid) machine type name says; unknown parts are None."""
    if machine_type in _SHARED_CORE_MEMORY_GIB:
        return MachineSize(SHARED_CORE_VCPUS, _SHARED_CORE_MEMORY_GIB[machine_type])
    custom = _CUSTOM.fullmatch(machine_type)
    if custom:
        vcpus = custom["vcpus"]
        return MachineSize(float(vcpus) if vcpus.isdigit() else SHARED_CORE_VCPUS, int(custom["mb"]) / 1024)
    predefined = _PREDEFINED.fullmatch(machine_type)
    if predefined:
        count = int(predefined["vcpus"])
        per_vcpu = MEMORY_GIB_PER_VCPU.get(predefined["family"])
        return MachineSize(float(count), count * per_vcpu if per_vcpu is not None else None)
    return MachineSize(None, None)
