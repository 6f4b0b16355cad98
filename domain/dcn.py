"""Address plan for the extra VPC networks that carry cross-slice (DCN) traffic."""

from __future__ import annotations

import ipaddress
from itertools import combinations

# Jumbo frames: 8896 is the largest MTU a Google Cloud VPC allows, and what TPU DCN traffic wants.
DCN_MTU = 8896

# The procedure's tpu-subnet-1 and tpu-subnet-2.
DEFAULT_SUBNET_RANGES = ("10.50.0.0/16", "10.60.0.0/16")


def subnet_range_problems(ranges: tuple[str, ...]) -> list[str]:
    """Every reason these CIDR ranges cannot be the DCN subnets (empty when they can)."""
    problems: list[str] = []
    networks: list[ipaddress.IPv4Network] = []
    for cidr in ranges:
        try:
            network = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError as error:
            problems.append(f"{cidr!r} is not an IPv4 network in CIDR form ({error})")
            continue
        if not network.is_private:
            problems.append(f"{cidr} is not a private (RFC 1918) range")
        networks.append(network)
    for first, second in combinations(networks, 2):
        if first.overlaps(second):
            problems.append(f"{first} overlaps {second}")
    return problems
