"""The TPU node pools the stack asks pulumi-gcp for, against what `gcloud container node-pools
create` itself sends GKE for each capacity choice.

gcloud runs for real against a fake Container API on 127.0.0.1 (tests/support/fake_container_api.py)
and its request body is recorded. The gcloud commands below are written from GKE's documentation
and Google's xpk, not from the stack's code, so a field the stack gets wrong (a missing
`flexStart`, an autoscaling bound that is not the slice's VM count, auto-repair left on for
flex-start) shows up as a difference with what gcloud sends:

- a held slice: `--num-nodes=<VMs>` (the manual procedure);
- a slice that scales from zero: `--enable-autoscaling --num-nodes=0 --total-min-nodes=0
  --total-max-nodes=<VMs>` (multi-host TPU pools scale as one unit, 0 or every VM);
- Spot: `--spot`; a reservation: `--reservation-affinity=specific --reservation=NAME`;
- flex-start: `--flex-start --enable-autoscaling --num-nodes=0 ... --location-policy=ANY
  --reservation-affinity=none --no-enable-autorepair`, the flags xpk passes for a flex-start TPU
  pool (github.com/AI-Hypercomputer/xpk, src/xpk/core/capacity.py and nodepool.py);
- image streaming (issue 33), on the TPU pools and the Ray head's: `--enable-image-streaming
  --image-type=COS_CONTAINERD` (GKE's image streaming page), and the worker image's cache disk on
  the TPU pools: `--secondary-boot-disk=disk-image=IMAGE,mode=CONTAINER_IMAGE_CACHE` (GKE's
  secondary boot disk page). With streaming, gcloud first asks Service Usage whether the Container
  File System API is enabled: the stack enables it.
"""

from __future__ import annotations

from typing import Any

import pytest

from domain.resources import gcp_resources
from domain.resources.gcp_resources import REQUIRED_APIS
from tests.support.cli_settings import infra_settings
from tests.support.fake_container_api import gcloud_node_pool_create, gcloud_path

pytestmark = pytest.mark.skipif(
    gcloud_path() is None,
    reason="gcloud is not installed: these tests compare the node pools with the request gcloud sends",
)

PROJECT, ZONE = "my-project", "us-east5-b"
BASE = {"gcp:project": PROJECT, "gcp:region": "us-east5", "gcp:zone": ZONE}
NETWORKS = [("net-1", "tpu-subnet-1"), ("net-2", "tpu-subnet-2")]

# The default preset's slice, from the catalog's facts (v6e-16 = 4x4 = 4 VMs of 4 chips), written
# out so the stack's own derivation of them is checked too.
MACHINE, TOPOLOGY, VMS = "ct6e-standard-4t", "4x4", 4

# Pulumi input path -> Container API JSON path: what pulumi-gcp (Terraform's expandNodePool)
# sends for each input at create. `node_count` becomes the create's `initialNodeCount`.
PULUMI_TO_API: dict[tuple[str, ...], tuple[str, ...]] = {
    ("node_count",): ("initialNodeCount",),
    ("node_locations",): ("locations",),
    ("node_config", "machine_type"): ("config", "machineType"),
    ("node_config", "spot"): ("config", "spot"),
    ("node_config", "flex_start"): ("config", "flexStart"),
    ("node_config", "reservation_affinity", "consume_reservation_type"): (
        "config",
        "reservationAffinity",
        "consumeReservationType",
    ),
    ("node_config", "reservation_affinity", "key"): ("config", "reservationAffinity", "key"),
    ("node_config", "reservation_affinity", "values"): ("config", "reservationAffinity", "values"),
    ("autoscaling", "total_min_node_count"): ("autoscaling", "totalMinNodeCount"),
    ("autoscaling", "total_max_node_count"): ("autoscaling", "totalMaxNodeCount"),
    ("autoscaling", "location_policy"): ("autoscaling", "locationPolicy"),
    ("management", "auto_repair"): ("management", "autoRepair"),
    ("management", "auto_upgrade"): ("management", "autoUpgrade"),
    ("placement_policy", "type"): ("placementPolicy", "type"),
    ("placement_policy", "tpu_topology"): ("placementPolicy", "tpuTopology"),
    ("node_config", "gcfs_config", "enabled"): ("config", "gcfsConfig", "enabled"),
    ("node_config", "image_type"): ("config", "imageType"),
    ("node_config", "secondary_boot_disks"): ("config", "secondaryBootDisks"),
}
# Inside a list of nested inputs (the secondary boot disks), each item's keys as the API names them.
ITEM_KEYS = {"disk_image": "diskImage", "mode": "mode"}

# The Container API is proto3: a scalar left out reads as its zero value, so gcloud's explicit
# `"initialNodeCount": 0` or `"totalMinNodeCount": 0` and the provider leaving them out (Go's
# omitempty) are the same request.
API_ZERO_VALUES: dict[tuple[str, ...], Any] = {
    ("initialNodeCount",): 0,
    ("config", "spot"): False,
    ("config", "flexStart"): False,
    ("autoscaling", "totalMinNodeCount"): 0,
    ("management", "autoRepair"): False,
}

MISSING = object()


def at(node: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        if not isinstance(node, dict) or step not in node:
            return MISSING
        node = node[step]
    return node


def as_api_request(args: dict[str, Any]) -> dict[tuple[str, ...], Any]:
    """The fields that matter of the create pulumi-gcp sends for these args, by API path."""
    fields = {api: _api_items(at(args, pulumi)) for pulumi, api in PULUMI_TO_API.items()}
    # The provider turns a present autoscaling block into `autoscaling.enabled: true`.
    fields[("autoscaling", "enabled")] = True if "autoscaling" in args else MISSING
    return {path: API_ZERO_VALUES.get(path, MISSING) if value is MISSING else value for path, value in fields.items()}


def _api_items(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return [{ITEM_KEYS[key]: item_value for key, item_value in item.items()} for item in value]
    return value


def as_sent(body: dict[str, Any]) -> dict[tuple[str, ...], Any]:
    paths = [*PULUMI_TO_API.values(), ("autoscaling", "enabled")]
    return {path: API_ZERO_VALUES.get(path, MISSING) if at(body, path) is MISSING else at(body, path) for path in paths}


HELD = [f"--num-nodes={VMS}"]
SCALES_FROM_ZERO = ["--enable-autoscaling", "--num-nodes=0", "--total-min-nodes=0", f"--total-max-nodes={VMS}"]
SPOT = ["--spot"]
RESERVED = ["--reservation-affinity=specific", "--reservation=v6e-reservation"]
STREAMING = ["--enable-image-streaming", "--image-type=COS_CONTAINERD"]
DISK = "projects/image-project/global/images/maxtext-ray-2-60-0"
FLEX_START = [
    "--flex-start",
    *SCALES_FROM_ZERO,
    "--location-policy=ANY",
    "--reservation-affinity=none",
    "--no-enable-autorepair",
]

# (case, stack settings, pool index, the capacity flags gcloud gets for that pool); every stack
# streams images unless it says otherwise (imageStreaming's default).
CASES = [
    ("on-demand, held", {"minSlices": 2}, 0, [*HELD, *STREAMING]),
    ("on-demand, scales from zero", {}, 0, [*SCALES_FROM_ZERO, *STREAMING]),
    ("on-demand, one held and one scaling: the held", {"minSlices": 1}, 0, [*HELD, *STREAMING]),
    ("on-demand, one held and one scaling: the scaling", {"minSlices": 1}, 1, [*SCALES_FROM_ZERO, *STREAMING]),
    ("spot, held", {"capacity": "spot", "minSlices": 2}, 1, [*HELD, *SPOT, *STREAMING]),
    ("spot, scales from zero", {"capacity": "spot"}, 0, [*SCALES_FROM_ZERO, *SPOT, *STREAMING]),
    (
        "reservation, held",
        {"capacity": "reservation", "reservation": "v6e-reservation", "minSlices": 2},
        0,
        [*HELD, *RESERVED, *STREAMING],
    ),
    (
        "reservation, scales from zero",
        {"capacity": "reservation", "reservation": "v6e-reservation"},
        1,
        [*SCALES_FROM_ZERO, *RESERVED, *STREAMING],
    ),
    ("flex-start", {"capacity": "flex-start"}, 0, [*FLEX_START, *STREAMING]),
    ("no image streaming", {"imageStreaming": "false"}, 0, SCALES_FROM_ZERO),
    (
        "image cache disk, another project's",
        {"imageCacheDisk": DISK},
        1,
        [*SCALES_FROM_ZERO, *STREAMING, f"--secondary-boot-disk=disk-image={DISK},mode=CONTAINER_IMAGE_CACHE"],
    ),
    (
        "image cache disk, this project's",
        {"imageCacheDisk": "global/images/maxtext-ray-2-60-0", "minSlices": 2},
        0,
        [
            *HELD,
            *STREAMING,
            "--secondary-boot-disk=disk-image=global/images/maxtext-ray-2-60-0,mode=CONTAINER_IMAGE_CACHE",
        ],
    ),
]


def gcloud_flags(pool_name: str, capacity_flags: list[str]) -> list[str]:
    return [
        pool_name,
        "--cluster=maxtext-tpu",
        f"--location={ZONE}",
        f"--project={PROJECT}",
        f"--node-locations={ZONE}",
        f"--machine-type={MACHINE}",
        f"--tpu-topology={TOPOLOGY}",
        "--placement-type=COMPACT",
        *capacity_flags,
    ]


@pytest.mark.parametrize("case, overrides, index, capacity_flags", CASES, ids=[case[0] for case in CASES])
def test_tpu_pool_is_what_gcloud_sends(tmp_path, case, overrides, index, capacity_flags):
    settings = infra_settings({**BASE, **overrides})
    args = gcp_resources.tpu_pool_args(settings, index, "maxtext-tpu", "nodes@x", NETWORKS)
    sent = gcloud_node_pool_create(tmp_path, gcloud_flags(args["name"], capacity_flags))
    assert sent["name"] == args["name"] == f"v6e-16-{index}"
    ours, theirs = as_api_request(args), as_sent(sent)
    differences = {".".join(path): (ours[path], theirs[path]) for path in ours if ours[path] != theirs[path]}
    assert differences == {}, f"{case}: (stack, gcloud) differ"


@pytest.mark.parametrize("streaming", [True, False])
def test_the_head_pool_is_what_gcloud_sends(tmp_path, streaming):
    """The Ray head's on-demand CPU pool streams the worker image too; with streaming, gcloud asks
    whether the Container File System API is enabled, which the stack enables (REQUIRED_APIS)."""
    settings = infra_settings({**BASE, "imageStreaming": str(streaming).lower()})
    args = gcp_resources.head_pool_args(settings)
    checked: list[str] = []
    flags = [
        args["name"],
        "--cluster=maxtext-tpu",
        f"--location={ZONE}",
        f"--project={PROJECT}",
        "--machine-type=n1-standard-16",
        "--num-nodes=1",
        *(STREAMING if streaming else []),
    ]
    ours, theirs = as_api_request(args), as_sent(gcloud_node_pool_create(tmp_path, flags, services_checked=checked))
    assert {".".join(path): (ours[path], theirs[path]) for path in ours if ours[path] != theirs[path]} == {}
    assert checked == (["containerfilesystem.googleapis.com"] if streaming else [])
    assert set(checked) <= set(REQUIRED_APIS)


def test_the_comparison_sees_a_wrong_field(tmp_path):
    """The comparison itself: a flex-start pool with auto-repair left on, or bounded at fewer
    VMs than the slice, is not what gcloud sends."""
    settings = infra_settings({**BASE, "capacity": "flex-start"})
    sent = as_sent(gcloud_node_pool_create(tmp_path, gcloud_flags("v6e-16-0", FLEX_START)))
    args = gcp_resources.tpu_pool_args(settings, 0, "maxtext-tpu", "nodes@x", NETWORKS)
    args["management"]["auto_repair"] = True
    args["autoscaling"]["total_max_node_count"] = VMS - 1
    ours = as_api_request(args)
    assert {".".join(p) for p in ours if ours[p] != sent[p]} == {
        "management.autoRepair",
        "autoscaling.totalMaxNodeCount",
        "config.gcfsConfig.enabled",  # gcloud was not asked to stream, the stack streams
        "config.imageType",
    }


def test_the_comparison_sees_a_wrong_boot_disk_mode(tmp_path):
    settings = infra_settings({**BASE, "imageCacheDisk": DISK})
    flags = [*SCALES_FROM_ZERO, *STREAMING, f"--secondary-boot-disk=disk-image={DISK},mode=CONTAINER_IMAGE_CACHE"]
    sent = as_sent(gcloud_node_pool_create(tmp_path, gcloud_flags("v6e-16-0", flags)))
    args = gcp_resources.tpu_pool_args(settings, 0, "maxtext-tpu", "nodes@x", NETWORKS)
    args["node_config"]["secondary_boot_disks"][0]["mode"] = "MODE_UNSPECIFIED"
    ours = as_api_request(args)
    assert {".".join(p) for p in ours if ours[p] != sent[p]} == {"config.secondaryBootDisks"}
