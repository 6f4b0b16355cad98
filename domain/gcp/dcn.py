"""Address plan for the extra VPC networks that carry cross-slice (DCN) traffic, and the
arithmetic that says whether a plan can work: each range valid for a Google Cloud subnet, big
enough for the slices' VMs, and clear of the cluster's own primary subnet (a VM's network
interfaces may not sit in overlapping subnets)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from itertools import combinations
from types import MappingProxyType

# Jumbo frames: 8896 is the largest MTU a Google Cloud VPC allows, and what TPU DCN traffic wants.
DCN_MTU = 8896

# The procedure's tpu-subnet-1 and tpu-subnet-2.
DEFAULT_SUBNET_RANGES = ("10.50.0.0/16", "10.60.0.0/16")

# Google Cloud's rules for a subnet's primary IPv4 range (sources: docs/deploying.md, "DCN ranges").
MIN_PREFIX_LENGTH = 29
# The network, the default gateway, the second-to-last and the broadcast address.
RESERVED_ADDRESSES_PER_SUBNET = 4
# Besides privately used public ranges, which `subnet_range_problems` refuses on purpose.
VALID_PRIVATE_RANGES: Mapping[str, str] = MappingProxyType(
    {
        "10.0.0.0/8": "RFC 1918",
        "172.16.0.0/12": "RFC 1918",
        "192.168.0.0/16": "RFC 1918",
        "100.64.0.0/10": "RFC 6598 shared address space",
        "192.0.0.0/24": "RFC 6890 IETF protocol assignments",
        "192.0.2.0/24": "RFC 5737 documentation (TEST-NET-1)",
        "198.51.100.0/24": "RFC 5737 documentation (TEST-NET-2)",
        "203.0.113.0/24": "RFC 5737 documentation (TEST-NET-3)",
        "192.88.99.0/24": "RFC 7526 6to4 relay anycast (deprecated)",
        "198.18.0.0/15": "RFC 2544 benchmark testing",
        "240.0.0.0/4": "RFC 5735 and RFC 1112 reserved for future use (class E)",
    }
)
UNUSABLE_RANGES: Mapping[str, str] = MappingProxyType(
    {
        "0.0.0.0/8": "'this network' (RFC 1122)",
        "127.0.0.0/8": "loopback (RFC 1122)",
        "169.254.0.0/16": "link-local (RFC 3927), where the metadata server lives",
        "224.0.0.0/4": "multicast (RFC 5771)",
        "255.255.255.255/32": "limited broadcast (RFC 8190)",
    }
)

# Each region's subnet in an auto mode network (source: docs/deploying.md, "DCN ranges"); a region
# added since is treated as unknown (`primary_overlap_problems`).
AUTO_MODE_BLOCK = "10.128.0.0/9"  # every auto mode subnet is carved from this block
AUTO_MODE_NETWORK = "default"  # the auto mode network every project starts with
AUTO_MODE_SUBNETS: Mapping[str, str] = MappingProxyType(
    {
        "africa-south1": "10.218.0.0/20",
        "asia-east1": "10.140.0.0/20",
        "asia-east2": "10.170.0.0/20",
        "asia-northeast1": "10.146.0.0/20",
        "asia-northeast2": "10.174.0.0/20",
        "asia-northeast3": "10.178.0.0/20",
        "asia-south1": "10.160.0.0/20",
        "asia-south2": "10.190.0.0/20",
        "asia-southeast1": "10.148.0.0/20",
        "asia-southeast2": "10.184.0.0/20",
        "australia-southeast1": "10.152.0.0/20",
        "australia-southeast2": "10.192.0.0/20",
        "europe-central2": "10.186.0.0/20",
        "europe-north1": "10.166.0.0/20",
        "europe-north2": "10.226.0.0/20",
        "europe-southwest1": "10.204.0.0/20",
        "europe-west1": "10.132.0.0/20",
        "europe-west10": "10.214.0.0/20",
        "europe-west12": "10.210.0.0/20",
        "europe-west2": "10.154.0.0/20",
        "europe-west3": "10.156.0.0/20",
        "europe-west4": "10.164.0.0/20",
        "europe-west6": "10.172.0.0/20",
        "europe-west8": "10.198.0.0/20",
        "europe-west9": "10.200.0.0/20",
        "me-central1": "10.212.0.0/20",
        "me-west1": "10.208.0.0/20",
        "northamerica-northeast1": "10.162.0.0/20",
        "northamerica-northeast2": "10.188.0.0/20",
        "northamerica-south1": "10.224.0.0/20",
        "southamerica-east1": "10.158.0.0/20",
        "southamerica-west1": "10.194.0.0/20",
        "us-central1": "10.128.0.0/20",
        "us-east1": "10.142.0.0/20",
        "us-east4": "10.150.0.0/20",
        "us-east5": "10.202.0.0/20",
        "us-south1": "10.206.0.0/20",
        "us-west1": "10.138.0.0/20",
        "us-west2": "10.168.0.0/20",
        "us-west3": "10.180.0.0/20",
        "us-west4": "10.182.0.0/20",
    }
)

VALID_RULE = (
    f"non-overlapping ranges of /{MIN_PREFIX_LENGTH} or larger (for example "
    f"{', '.join(DEFAULT_SUBNET_RANGES)}) within a private range Google Cloud accepts for subnets: "
    f"{', '.join(VALID_PRIVATE_RANGES)}"
)


def _within(network: ipaddress.IPv4Network, table: Mapping[str, str]) -> str | None:
    """The table's entry (`range (what)`) that holds or meets `network`, if any."""
    for cidr, what in table.items():
        if network.overlaps(ipaddress.IPv4Network(cidr)):
            return f"{cidr} ({what})"
    return None


def usable_addresses(network: ipaddress.IPv4Network) -> int:
    """Addresses of a primary range that VMs can take."""
    return max(network.num_addresses - RESERVED_ADDRESSES_PER_SUBNET, 0)


def smallest_prefix_for(vms: int) -> int:
    """The longest prefix whose range still holds `vms` VMs (and at most /29)."""
    prefix = MIN_PREFIX_LENGTH
    while prefix > 0 and 2 ** (32 - prefix) - RESERVED_ADDRESSES_PER_SUBNET < vms:
        prefix -= 1
    return prefix


def subnet_range_problems(ranges: tuple[str, ...], *, vms: int | None = None) -> list[str]:
    """Every reason these CIDR ranges cannot be the DCN subnets (empty when they can). `vms` is
    how many TPU VMs take an address in each (one per VM per DCN network), when known."""
    problems: list[str] = []
    networks: list[ipaddress.IPv4Network] = []
    for cidr in ranges:
        try:
            network = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError as error:
            problems.append(f"{cidr!r} is not an IPv4 network in CIDR form ({error})")
            continue
        unusable = _within(network, UNUSABLE_RANGES)
        if unusable is not None:
            problems.append(f"{network} meets {unusable}, which no subnet may use")
        elif _within(network, VALID_PRIVATE_RANGES) is None:
            # Google Cloud would take it as a privately used public range, but then the TPU VMs
            # could no longer reach the real hosts at those addresses (registries, APIs).
            problems.append(
                f"{network} is a public range: used privately, it would hide the internet hosts at those "
                "addresses from the TPU VMs"
            )
        elif not any(network.subnet_of(ipaddress.IPv4Network(valid)) for valid in VALID_PRIVATE_RANGES):
            problems.append(f"{network} is not within one private range (it spans two)")
        if network.prefixlen > MIN_PREFIX_LENGTH:
            problems.append(f"{network} is smaller than /{MIN_PREFIX_LENGTH}, Google Cloud's smallest subnet")
        elif vms is not None and usable_addresses(network) < vms:
            problems.append(
                f"{network} has {usable_addresses(network)} usable addresses ({network.num_addresses} less the "
                f"{RESERVED_ADDRESSES_PER_SUBNET} Google Cloud reserves), but the slices' {vms} TPU VMs take one "
                f"each; use a /{smallest_prefix_for(vms)} or larger"
            )
        networks.append(network)
    for first, second in combinations(networks, 2):
        if first.overlaps(second):
            problems.append(f"{first} overlaps {second}")
    return problems


def primary_overlap_problems(ranges: tuple[str, ...], *, network: str, region: str) -> list[str]:
    """DCN ranges that overlap (or may overlap) the primary subnet of the cluster's nodes in
    `network`: a TPU VM's first interface sits there, and Compute Engine refuses a VM whose
    interfaces' subnets overlap. Known for an auto mode `default` network in a region of the
    table; otherwise any range in the auto mode block is refused, as it cannot be checked."""
    known = AUTO_MODE_SUBNETS.get(region) if network == AUTO_MODE_NETWORK else None
    problems = []
    for cidr in ranges:
        try:
            dcn = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError:
            continue  # reported by subnet_range_problems
        if known is not None:
            if dcn.overlaps(ipaddress.IPv4Network(known)):
                problems.append(
                    f"{dcn} overlaps {known}, the {region} subnet of the auto mode network {network!r} the "
                    "cluster's nodes use; a TPU VM cannot have interfaces in overlapping subnets"
                )
        elif dcn.overlaps(ipaddress.IPv4Network(AUTO_MODE_BLOCK)):
            where = (
                f"region {region!r} is not in the table of auto mode ranges (AUTO_MODE_SUBNETS in domain/gcp/dcn.py)"
                if network == AUTO_MODE_NETWORK
                else f"the ranges of network {network!r} are not known here"
            )
            problems.append(
                f"{dcn} is in {AUTO_MODE_BLOCK}, the auto mode subnets' block, and {where}, so it cannot be "
                "told apart from the cluster's primary subnet; use a range outside it"
            )
    return problems
