"""Every Google Cloud resource's arguments, nested dicts included, against the SDK's typed Args."""

import pulumi_gcp as gcp
import pytest

from domain.compile_cache import COMPILE_CACHE_PREFIX
from domain.resources import gcp_resources, worker_image
from tests.support.cli_settings import infra_settings
from tests.support.typed_args import to_typed_args

BASE = {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"}
NETWORKS = [("net-1", "tpu-subnet-1"), ("net-2", "tpu-subnet-2")]
EMAIL = "nodes@my-project.iam.gserviceaccount.com"


def settings(**overrides):
    return infra_settings({**BASE, **overrides})


VARIANTS = {
    "standard": settings(),
    "standard-spot": settings(capacity="spot"),
    "standard-reserved": settings(capacity="reservation", reservation="v6e-reservation", bucketName="ckpt-bucket"),
    # Spot and a reservation are refused together (Spot VMs cannot consume reservations).
    "autopilot-spot": settings(mode="autopilot", capacity="spot"),
    "autopilot-reserved": settings(mode="autopilot", capacity="reservation", reservation="r"),
    "standard-shared-reservation": settings(
        capacity="reservation", reservation="projects/owner-project/reservations/v6e"
    ),
    "standard-dataset": settings(datasetBucket="acme-corpus", datasetPrefix="web/v1"),
    "standard-image-cache-disk": settings(imageCacheDisk="projects/image-project/global/images/maxtext-ray-2-60-0"),
    "standard-no-streaming": settings(imageStreaming="false", compileCacheMaxAgeDays="7"),
    "standard-hierarchical-bucket": settings(bucketHierarchicalNamespace="true", bucketForceDestroy="false"),
}
PRINCIPAL = "principal://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p.svc.id.goog/subject/ns/default/sa/maxtext-ray"


def with_email(args):
    return gcp_resources.fill(args, gcp_resources.NODE_SERVICE_ACCOUNT, EMAIL)


def all_resource_args(s):
    yield gcp.container.ClusterArgs, with_email(gcp_resources.cluster_args(s))
    yield gcp.container.NodePoolArgs, {**with_email(gcp_resources.head_pool_args(s)), "cluster": "cluster"}
    for index in range(s.slices):
        yield gcp.container.NodePoolArgs, gcp_resources.tpu_pool_args(s, index, "cluster", EMAIL, NETWORKS)
    for index in range(len(s.dcn_subnets)):
        yield gcp.compute.NetworkArgs, gcp_resources.dcn_network_args(s, index)
        yield gcp.compute.SubnetworkArgs, {**gcp_resources.dcn_subnet_args(s, index), "network": "net-id"}
        yield gcp.compute.FirewallArgs, {**gcp_resources.dcn_firewall_args(s, index), "network": "net-id"}
    yield gcp.storage.BucketArgs, gcp_resources.bucket_args(s)
    dataset_access = gcp_resources.dataset_access_args(s)
    if dataset_access is not None:
        yield gcp.storage.BucketIAMMemberArgs, {**dataset_access, "member": PRINCIPAL}
    yield gcp.serviceaccount.AccountArgs, gcp_resources.node_service_account_args(s)
    for api in gcp_resources.REQUIRED_APIS:
        yield gcp.projects.ServiceArgs, gcp_resources.project_service_args(s, api)
    yield gcp.artifactregistry.RepositoryArgs, worker_image.repository_args(s)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_nested_input_converts_to_typed_args(variant):
    converted = [to_typed_args(args_class, args) for args_class, args in all_resource_args(VARIANTS[variant])]
    assert len(converted) >= 10


def test_typed_conversion_reaches_nested_values():
    pool = to_typed_args(
        gcp.container.NodePoolArgs, gcp_resources.tpu_pool_args(VARIANTS["standard"], 0, "c", EMAIL, NETWORKS)
    )
    assert isinstance(pool.node_config, gcp.container.NodePoolNodeConfigArgs)
    assert pool.node_config.advanced_machine_features.threads_per_core == 1
    attached = pool.network_config.additional_node_network_configs
    assert [(a.network, a.subnetwork) for a in attached] == NETWORKS


@pytest.mark.parametrize(
    "path",
    [
        ("node_config", "machine_typ"),
        ("placement_policy", "tpu_topolgy"),
        ("node_config", "advanced_machine_features", "threads_per_cor"),
        ("network_config", "additional_node_network_configs", 0, "subnetwrk"),
        ("autoscaling", "total_max_node_cout"),
    ],
)
def test_a_misspelt_nested_key_fails(path):
    args = gcp_resources.tpu_pool_args(VARIANTS["standard"], 0, "cluster", EMAIL, NETWORKS)
    node = args
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = "oops"
    with pytest.raises(TypeError, match=path[-1]):
        to_typed_args(gcp.container.NodePoolArgs, args)


def test_repository_docker_config_reaches_its_typed_args():
    repository = to_typed_args(gcp.artifactregistry.RepositoryArgs, worker_image.repository_args(VARIANTS["standard"]))
    assert isinstance(repository.docker_config, gcp.artifactregistry.RepositoryDockerConfigArgs)
    assert repository.docker_config.immutable_tags is True
    args = worker_image.repository_args(VARIANTS["standard"])
    args["docker_config"] = {"immutable_tag": True}
    with pytest.raises(TypeError, match="immutable_tag"):
        to_typed_args(gcp.artifactregistry.RepositoryArgs, args)


def test_misspelt_cluster_addon_fails():
    args = gcp_resources.cluster_args(VARIANTS["standard"])
    args["addons_config"]["ray_operator_config"] = [{"enabled": True}]  # the singular is wrong
    with pytest.raises(TypeError, match="ray_operator_config"):
        to_typed_args(gcp.container.ClusterArgs, args)


def test_spot_pools_extend_the_kubelets_shutdown_grace_period():
    """docs/spot.md: GKE takes these fields on Spot node pools only (Standard; Autopilot makes its
    own nodes), 120 s being the largest value its API allows."""
    spot = to_typed_args(
        gcp.container.NodePoolArgs, gcp_resources.tpu_pool_args(VARIANTS["standard-spot"], 0, "c", EMAIL, NETWORKS)
    )
    kubelet = spot.node_config.kubelet_config
    assert isinstance(kubelet, gcp.container.NodePoolNodeConfigKubeletConfigArgs)
    assert (kubelet.shutdown_grace_period_seconds, kubelet.shutdown_grace_period_critical_pods_seconds) == (120, 15)
    for on_demand in ("standard", "standard-reserved"):
        args = gcp_resources.tpu_pool_args(VARIANTS[on_demand], 0, "c", EMAIL, NETWORKS)
        assert "kubelet_config" not in args["node_config"]
    assert "kubelet_config" not in gcp_resources.head_pool_args(VARIANTS["standard-spot"])["node_config"]


def test_the_nodes_service_account_has_a_slot_where_it_goes_and_fill_puts_it_there():
    """The account exists only once created: the args hold its place, the component fills it."""
    slot = gcp_resources.NODE_SERVICE_ACCOUNT
    head_pool = gcp_resources.head_pool_args(VARIANTS["standard"])
    assert head_pool["node_config"]["service_account"] is slot
    autopilot = gcp_resources.cluster_args(VARIANTS["autopilot-spot"])
    assert autopilot["cluster_autoscaling"] == {"auto_provisioning_defaults": {"service_account": slot}}
    # Standard's own nodes are its pools'.
    standard = gcp_resources.cluster_args(VARIANTS["standard"])
    assert "cluster_autoscaling" not in standard and with_email(standard) == standard
    filled = with_email(head_pool)
    assert filled["node_config"]["service_account"] == EMAIL
    assert head_pool["node_config"]["service_account"] is slot, "fill copies; the args stay as they were"
    assert with_email({"a": [{"b": slot}, slot, "c"]}) == {"a": [{"b": EMAIL}, EMAIL, "c"]}


# Every capacity choice a Standard stack can take, held (minSlices = slices) and scaling from zero
# (minSlices = 0; flex-start only scales). Spot cannot consume a reservation and the settings
# refuse a fallback order on Standard, so these are all the pool shapes there are.
CAPACITY_VARIANTS = {
    "on-demand-held": settings(minSlices="2"),
    "on-demand-scaling": settings(),
    "spot-held": settings(capacity="spot", minSlices="2"),
    "spot-scaling": settings(capacity="spot"),
    "reservation-held": settings(capacity="reservation", reservation="v6e-reservation", minSlices="2"),
    "reservation-scaling": settings(capacity="reservation", reservation="v6e-reservation"),
    "flex-start": settings(capacity="flex-start"),
}


@pytest.mark.parametrize("variant", list(CAPACITY_VARIANTS))
def test_every_capacity_choice_converts_to_typed_node_pool_args(variant):
    s = CAPACITY_VARIANTS[variant]
    for index in range(s.slices):
        pool = to_typed_args(gcp.container.NodePoolArgs, gcp_resources.tpu_pool_args(s, index, "c", EMAIL, NETWORKS))
        assert isinstance(pool.node_config, gcp.container.NodePoolNodeConfigArgs)
        assert isinstance(pool.management, gcp.container.NodePoolManagementArgs)
        if variant.endswith("-held"):
            assert (pool.node_count, pool.autoscaling) == (4, None)
        else:
            # 0 or the whole slice; pulumi-gcp creates the pool with initialNodeCount 0.
            assert isinstance(pool.autoscaling, gcp.container.NodePoolAutoscalingArgs)
            assert (pool.autoscaling.total_min_node_count, pool.autoscaling.total_max_node_count) == (0, 4)
            assert (pool.node_count, pool.initial_node_count) == (None, None)


def test_pools_below_min_slices_are_held_and_the_rest_scale():
    s = settings(minSlices="1", slices="3")
    pools = [gcp_resources.tpu_pool_args(s, index, "c", EMAIL, NETWORKS) for index in range(3)]
    assert [("node_count" in p, "autoscaling" in p) for p in pools] == [(True, False), (False, True), (False, True)]
    assert [gcp_resources.tpu_pool_autoscales(s, index) for index in range(3)] == [False, True, True]


def test_flex_start_pools_are_what_gke_requires():
    """Autoscaled from 0 in any zone with capacity, never from a reservation, not auto-repaired."""
    pool = to_typed_args(
        gcp.container.NodePoolArgs,
        gcp_resources.tpu_pool_args(CAPACITY_VARIANTS["flex-start"], 1, "c", EMAIL, NETWORKS),
    )
    assert (pool.node_config.flex_start, pool.node_config.spot) == (True, False)
    assert pool.node_config.reservation_affinity.consume_reservation_type == "NO_RESERVATION"
    assert pool.autoscaling.location_policy == "ANY"
    assert (pool.management.auto_repair, pool.management.auto_upgrade) == (False, True)
    for other in ("on-demand-scaling", "spot-scaling", "reservation-held"):
        args = gcp_resources.tpu_pool_args(CAPACITY_VARIANTS[other], 1, "c", EMAIL, NETWORKS)
        assert args["node_config"]["flex_start"] is False
        assert args["management"]["auto_repair"] is True
        assert "location_policy" not in args.get("autoscaling", {})


def test_the_dataset_bucket_is_granted_read_only_and_only_with_a_dataset():
    """roles/storage.objectViewer on the existing bucket named by datasetBucket (its prefix is the
    mount's business, not the grant's); no grant at all without one."""
    grant = to_typed_args(
        gcp.storage.BucketIAMMemberArgs,
        {**gcp_resources.dataset_access_args(VARIANTS["standard-dataset"]), "member": PRINCIPAL},
    )
    assert (grant.bucket, grant.role, grant.member) == ("acme-corpus", "roles/storage.objectViewer", PRINCIPAL)
    assert gcp_resources.DATASET_ROLE == "roles/storage.objectViewer"
    assert gcp_resources.dataset_access_args(VARIANTS["standard"]) is None


def test_streaming_pools_and_the_image_cache_disk_reach_their_typed_args():
    """Image streaming on the TPU and head pools, on COS with containerd, and the worker image's
    cache disk on the TPU pools only (issue 33): each through pulumi-gcp's typed classes."""
    s = VARIANTS["standard-image-cache-disk"]
    tpu = to_typed_args(gcp.container.NodePoolArgs, gcp_resources.tpu_pool_args(s, 0, "c", EMAIL, NETWORKS))
    head = to_typed_args(gcp.container.NodePoolArgs, {**with_email(gcp_resources.head_pool_args(s)), "cluster": "c"})
    for pool in (tpu, head):
        assert isinstance(pool.node_config.gcfs_config, gcp.container.NodePoolNodeConfigGcfsConfigArgs)
        assert pool.node_config.gcfs_config.enabled is True
        assert pool.node_config.image_type == "COS_CONTAINERD"
    [disk] = tpu.node_config.secondary_boot_disks
    assert isinstance(disk, gcp.container.NodePoolNodeConfigSecondaryBootDiskArgs)
    assert (disk.disk_image, disk.mode) == (
        "projects/image-project/global/images/maxtext-ray-2-60-0",
        "CONTAINER_IMAGE_CACHE",
    )
    assert head.node_config.secondary_boot_disks is None  # one node, always up: nothing to preload for


def test_pools_without_streaming_name_neither_gcfs_nor_an_image_type():
    s = VARIANTS["standard-no-streaming"]
    for args in (gcp_resources.tpu_pool_args(s, 0, "c", EMAIL, NETWORKS), gcp_resources.head_pool_args(s)):
        assert not {"gcfs_config", "image_type", "secondary_boot_disks"} & set(args["node_config"])


@pytest.mark.parametrize("variant, age", [("standard", 30), ("standard-no-streaming", 7)])
def test_the_bucket_deletes_only_old_compile_cache_entries(variant, age):
    """One lifecycle rule: Delete, objects under the cache's prefix (with its '/', so a sibling
    such as jax-cache-old/ is kept), older than compileCacheMaxAgeDays."""
    bucket = to_typed_args(gcp.storage.BucketArgs, gcp_resources.bucket_args(VARIANTS[variant]))
    [rule] = bucket.lifecycle_rules
    assert isinstance(rule.condition, gcp.storage.BucketLifecycleRuleConditionArgs)
    assert rule.action.type == "Delete" and rule.action.storage_class is None
    assert rule.condition.age == age
    assert rule.condition.matches_prefixes == [f"{COMPILE_CACHE_PREFIX}/"]


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "standard-hierarchical-bucket"])
def test_a_bucket_is_flat_unless_the_stack_asks_for_hierarchical_namespace(variant):
    """Without bucketHierarchicalNamespace the bucket's arguments name no namespace at all, as
    before the setting existed: Cloud Storage fixes it when it creates a bucket, so any change to
    it would replace the bucket of every existing stack, checkpoints and all."""
    assert "hierarchical_namespace" not in gcp_resources.bucket_args(VARIANTS[variant])


def test_a_hierarchical_bucket_keeps_uniform_access_and_the_compile_cache_rule():
    """GKE's checkpoint advice: hierarchical namespace, so Orbax's commit (a directory rename) is one
    atomic folder rename. Cloud Storage takes it only with uniform bucket-level access; the
    compilation cache's lifecycle rule (objects under jax-cache/) and everything else stay."""
    hierarchical = gcp_resources.bucket_args(VARIANTS["standard-hierarchical-bucket"])
    flat = gcp_resources.bucket_args(settings(bucketForceDestroy="false"))
    assert hierarchical == {**flat, "hierarchical_namespace": {"enabled": True}}
    bucket = to_typed_args(gcp.storage.BucketArgs, hierarchical)
    assert isinstance(bucket.hierarchical_namespace, gcp.storage.BucketHierarchicalNamespaceArgs)
    assert bucket.hierarchical_namespace.enabled is True
    assert bucket.uniform_bucket_level_access is True
    [rule] = bucket.lifecycle_rules
    assert rule.condition.matches_prefixes == [f"{COMPILE_CACHE_PREFIX}/"]


def test_a_misspelt_lifecycle_condition_fails():
    args = gcp_resources.bucket_args(VARIANTS["standard"])
    args["lifecycle_rules"][0]["condition"]["matches_prefix"] = ["x/"]
    with pytest.raises(TypeError, match="matches_prefix"):
        to_typed_args(gcp.storage.BucketArgs, args)
