"""The pure arithmetic behind the settings checks, exactly: GKE's allocatable CPU and memory, what
a machine type's name says, the DCN address plan, a pinned image's Ray version, the flags the
catalog knows libtpu refuses, and whole-value matching in the name rules."""

from __future__ import annotations

import ipaddress

import pytest

from domain.gcp import dcn, gcp_names, gke, k8s_names
from domain.gcp.images import image_reference_problems, ray_version_of
from domain.gcp.machine_types import MachineSize, machine_size
from domain.tpu.tpu_catalog import ACCELERATORS


@pytest.mark.parametrize("vcpus, allocatable", [(1, 0.94), (2, 1.93), (4, 3.92), (8, 7.91), (16, 15.89), (96, 95.69)])
def test_allocatable_cpu_follows_gke_bands(vcpus, allocatable):
    assert gke.allocatable_cpu(vcpus) == pytest.approx(allocatable)


@pytest.mark.parametrize(
    "memory, allocatable",
    [(0.6, 0.6 - 255 / 1024 - 100 / 1024), (4, 3 - 100 / 1024), (16, 13.3 - 100 / 1024 + 0.1), (150, 140.1423)],
)
def test_allocatable_memory_follows_gke_bands(memory, allocatable):
    assert gke.allocatable_memory_gib(memory) == pytest.approx(allocatable, abs=1e-4)


@pytest.mark.parametrize(
    "machine_type, size",
    [
        ("n1-standard-16", MachineSize(16, 60)),
        ("n2-highcpu-16", MachineSize(16, 16)),
        ("c3-standard-88-lssd", MachineSize(88, 352)),
        ("n2-custom-8-32768", MachineSize(8, 32)),
        ("custom-4-5120", MachineSize(4, 5)),
        ("e2-medium", MachineSize(2, 4)),
        ("x4-megamem-960-metal", MachineSize(960, None)),
        ("a2-highgpu-1g", MachineSize(None, None)),
        ("ct6e-standard-4t", MachineSize(None, None)),
    ],
)
def test_machine_size_is_what_the_name_says(machine_type, size):
    assert machine_size(machine_type) == size


def test_dcn_capacity_and_minimum():
    assert dcn.usable_addresses(ipaddress.IPv4Network("10.0.0.0/29")) == 4
    assert dcn.smallest_prefix_for(8) == 28 and dcn.smallest_prefix_for(256) == 23 and dcn.smallest_prefix_for(1) == 29
    assert dcn.subnet_range_problems(("10.0.0.0/28",), vms=12) == []
    assert dcn.subnet_range_problems(("10.0.0.0/28",), vms=13)
    assert dcn.subnet_range_problems(("100.64.0.0/16", "240.0.0.0/16", "192.0.2.0/24")) == []
    assert dcn.subnet_range_problems(("10.0.0.0/7",)) == ["10.0.0.0/7 is not within one private range (it spans two)"]


def test_auto_mode_table_is_inside_the_auto_mode_block():
    block = ipaddress.IPv4Network(dcn.AUTO_MODE_BLOCK)
    subnets = [ipaddress.IPv4Network(cidr) for cidr in dcn.AUTO_MODE_SUBNETS.values()]
    assert all(subnet.subnet_of(block) and subnet.prefixlen == 20 for subnet in subnets)
    assert len(set(subnets)) == len(subnets)


def test_primary_overlap_is_known_for_default_and_refused_when_unknown():
    assert dcn.primary_overlap_problems(("10.128.16.0/20",), network="default", region="us-central1") == []
    assert dcn.primary_overlap_problems(("10.128.8.0/24",), network="default", region="us-central1")
    assert dcn.primary_overlap_problems(("10.128.16.0/20",), network="default", region="mars-north1")
    assert dcn.primary_overlap_problems(("10.50.0.0/16",), network="vpc", region="us-central1") == []


@pytest.mark.parametrize(
    "image, version",
    [
        ("rayproject/ray:2.60.0-py312-tpu", "2.60.0"),
        ("docker.io/rayproject/ray-ml:2.9.3", "2.9.3"),
        ("rayproject/ray@sha256:" + "a" * 64, None),
        ("us-docker.pkg.dev/p/r/ray:2.1.0", None),
        ("rayproject/ray:nightly-py312", None),
    ],
)
def test_ray_version_of_an_image(image, version):
    assert ray_version_of(image) == version


def test_refused_libtpu_flags_are_never_the_workers_own():
    for accelerator in ACCELERATORS.values():
        own = " ".join(accelerator.libtpu_flags)
        assert accelerator.refused_libtpu_flags(own) == []
    v6e = ACCELERATORS["v6e"]
    flag = "--xla_tpu_enable_async_collective_fusion_fuse_all_gather"
    assert [token for token, _ in v6e.refused_libtpu_flags(f"{flag} {flag}=TRUE {flag}=false")] == [
        flag,
        f"{flag}=TRUE",
    ]
    assert ACCELERATORS["v5e"].refused_libtpu_flags(flag) == []


@pytest.mark.parametrize(
    "problems_of, value",
    [
        (gcp_names.machine_type_problems, "n1-standard-16\n"),
        (gcp_names.reservation_problems, "projects/owner-project/reservations/res\n"),
        (image_reference_problems, "rayproject/ray:2.60.0\n"),
        (k8s_names.label_problems, "training\n"),
        (k8s_names.subdomain_problems, "ray.trainer\n"),
    ],
)
def test_a_trailing_line_break_is_not_part_of_a_valid_name(problems_of, value):
    assert problems_of(value.rstrip("\n")) == []
    assert problems_of(value) != []


def test_a_gke_version_is_matched_whole():
    with pytest.raises(ValueError):
        gke.parse_version("1.35.2-gke.1842000\n")


@pytest.mark.parametrize(
    "name, ok",
    [("2024-runs", True), ("a" * 63, True), ("a" * 64, False), ("-a", False), ("a_b", False), ("A", False)],
)
def test_namespace_is_an_rfc_1123_label(name, ok):
    assert (k8s_names.label_problems(name) == []) is ok


@pytest.mark.parametrize(
    "name, ok",
    [
        ("ray.trainer", True),
        ("a" * 63 + "." + "b" * 63, True),
        ("a" * 64, False),
        ("a." * 126 + "bb", False),  # 254 characters
        ("a..b", False),
        (".a", False),
        ("a.-b", False),
        ("Ray", False),
    ],
)
def test_service_account_is_a_dns_subdomain(name, ok):
    assert (k8s_names.subdomain_problems(name) == []) is ok
