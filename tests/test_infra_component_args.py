"""The components' own args: what each takes from the settings, and that a component needs nothing
else (it is built here from hand-written args, without settings)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pulumi
import pulumi_kubernetes as k8s
import pytest

from domain.resources import gcp_resources, kuberay, worker_image
from infra.components.apis import ProjectApis, ProjectApisArgs
from infra.components.cluster import GkeCluster, GkeClusterArgs
from infra.components.kuberay import KubeRayArgs
from infra.components.network import DcnNetworkArgs, DcnNetworks, DcnNetworksArgs
from infra.components.storage import CheckpointStorageArgs
from infra.components.tpu_slices import TpuPoolArgs, TpuSlices, TpuSlicesArgs
from infra.components.worker_image import WorkerImage, WorkerImageArgs
from tests.support.cli_settings import infra_settings
from tests.support.pulumi_harness import run_program

BASE = {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"}
NETWORKS = [("net-1", "tpu-subnet-1"), ("net-2", "tpu-subnet-2")]
EMAIL = "nodes@my-project.iam.gserviceaccount.com"
POOL = "gcp:container/nodePool:NodePool"
# The args only carry the provider to the Kubernetes objects; these tests create none.
NO_PROVIDER = cast(k8s.Provider, None)


def settings(**overrides):
    return infra_settings({**BASE, **overrides})


# ---------------------------------------------------------------- from the settings


def test_the_head_pool_is_standards_only():
    standard = GkeClusterArgs.from_settings(settings())
    assert standard.head_pool == gcp_resources.head_pool_args(settings())
    assert GkeClusterArgs.from_settings(settings(mode="autopilot")).head_pool is None


def test_the_cluster_args_leave_the_node_account_and_the_cluster_name_to_the_component():
    for mode in ("standard", "autopilot"):
        assert GkeClusterArgs.from_settings(settings(mode=mode)).cluster == gcp_resources.cluster_args(
            settings(mode=mode)
        )
    head_pool = GkeClusterArgs.from_settings(settings()).head_pool
    assert head_pool is not None and "cluster" not in head_pool
    assert head_pool["node_config"]["service_account"] is gcp_resources.NODE_SERVICE_ACCOUNT


def test_standard_has_one_pool_per_slice_held_up_to_min_slices():
    args = TpuSlicesArgs.from_settings(
        settings(slices=3, minSlices=1),
        cluster_name="c",
        node_service_account_email=EMAIL,
        dcn_networks=NETWORKS,
        kubernetes=NO_PROVIDER,
    )
    assert [pool.autoscales for pool in args.pools] == [False, True, True]
    assert [pool.pool["name"] for pool in args.pools] == ["v6e-16-0", "v6e-16-1", "v6e-16-2"]
    attached = args.pools[0].pool["network_config"]["additional_node_network_configs"]
    assert attached == [{"network": n, "subnetwork": s} for n, s in NETWORKS]
    assert args.compute_class is None


@pytest.mark.parametrize(
    ("capacity", "dranet", "has_class"), [("on-demand", True, True), ("spot", False, True), ("on-demand", False, False)]
)
def test_autopilot_has_no_pools_and_the_compute_class_its_workers_select(monkeypatch, capacity, dranet, has_class):
    monkeypatch.setattr(kuberay, "uses_dranet", lambda settings: dranet)
    stack = settings(mode="autopilot", capacity=capacity)
    args = TpuSlicesArgs.from_settings(
        stack,
        cluster_name="c",
        node_service_account_email=EMAIL,
        dcn_networks=[],
        kubernetes=NO_PROVIDER,
    )
    assert args.pools == ()
    assert (args.compute_class == kuberay.compute_class(stack)) if has_class else args.compute_class is None


@pytest.mark.parametrize("dranet", [True, False])
def test_the_claim_template_comes_with_dranet(monkeypatch, dranet):
    monkeypatch.setattr(kuberay, "uses_dranet", lambda settings: dranet)
    args = KubeRayArgs.from_settings(
        settings(), bucket_name="b", image="i", compile_cache="c", kubeconfig={}, kubernetes=NO_PROVIDER
    )
    assert (args.claim_template is not None) is dranet
    assert args.ray_cluster == kuberay.ray_cluster(settings(), "b", "i", "c")


def test_storage_and_networks_take_the_settings_values():
    stack = settings(namespace="ray", bucketName="ckpt")
    storage = CheckpointStorageArgs.from_settings(stack, kubernetes=NO_PROVIDER)
    assert (storage.project, storage.namespace, storage.service_account) == ("my-project", "ray", "maxtext-ray")
    assert storage.bucket == gcp_resources.bucket_args(stack)
    assert storage.dataset_access is None
    with_dataset = CheckpointStorageArgs.from_settings(settings(datasetBucket="acme-corpus"), kubernetes=NO_PROVIDER)
    assert with_dataset.dataset_access == {"bucket": "acme-corpus", "role": "roles/storage.objectViewer"}
    networks = DcnNetworksArgs.from_settings(stack).networks
    assert [n.network["name"] for n in networks] == ["maxtext-tpu-net-1", "maxtext-tpu-net-2"]
    assert [n.subnet["ip_cidr_range"] for n in networks] == list(stack.dcn_subnets)
    # The network's id is the component's to add: it exists only once the network does.
    assert not any("network" in n.subnet or "network" in n.firewall for n in networks)


def test_the_apis_and_the_image(tmp_path):
    stack = settings()
    assert [s["service"] for s in ProjectApisArgs.from_settings(stack).services] == list(gcp_resources.REQUIRED_APIS)
    for name in (worker_image.DOCKERFILE, worker_image.LOCK_FILE):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    image = WorkerImageArgs.from_settings(stack, tmp_path)
    assert image.uri == worker_image.image_uri(stack, worker_image.content_tag(tmp_path))
    assert image.build_script == worker_image.build_script(stack, image.uri)
    assert image.source_dir == tmp_path


# ---------------------------------------------------------------- components from their args alone


def _by_name(run, name):
    return next(r for r in run.registrations if r.name == name)


def test_the_cluster_component_fills_in_its_node_account_and_its_name():
    """The account and the cluster exist only inside the component: the args hold the account's
    slot (in the cluster's autoscaling defaults, in the pool's node_config), and no cluster name."""
    slot = gcp_resources.NODE_SERVICE_ACCOUNT

    def program():
        cluster = GkeCluster(
            "c",
            GkeClusterArgs(
                project="p",
                node_account={"account_id": "c-nodes", "project": "p"},
                cluster={
                    "name": "c",
                    "project": "p",
                    "location": "l",
                    "cluster_autoscaling": {"auto_provisioning_defaults": {"service_account": slot}},
                },
                head_pool={"name": "head", "project": "p", "node_config": {"service_account": slot, "spot": False}},
            ),
        )
        return {"email": cluster.node_service_account_email}

    run = run_program(program, {})
    email = run.outputs["email"]
    account = _by_name(run, "c-nodes")
    cluster = run.one("gcp:container/cluster:Cluster")
    assert cluster.inputs["clusterAutoscaling"] == {"autoProvisioningDefaults": {"serviceAccount": email}}
    assert account.urn in cluster.dependencies
    pool = _by_name(run, "c-ray-head-pool")
    assert pool.inputs["nodeConfig"] == {"serviceAccount": email, "spot": False}
    assert pool.inputs["cluster"] == "c"
    assert {account.urn, cluster.urn} <= set(pool.dependencies)


def test_components_need_only_their_args_and_wait_through_depends_on():
    """Hand-written args, no settings: the component registers what they say, and a component
    made to depend on another records that other's resources on each of its children."""

    def program():
        apis = ProjectApis(
            "apis",
            ProjectApisArgs(({"project": "p", "service": "compute.googleapis.com", "disable_on_destroy": False},)),
        )
        after_apis = pulumi.ResourceOptions(depends_on=[apis])
        networks = DcnNetworks(
            "dcn",
            DcnNetworksArgs(
                (
                    DcnNetworkArgs(
                        network={"name": "n1", "project": "p"},
                        subnet={"name": "s1", "project": "p", "ip_cidr_range": "10.0.0.0/16"},
                        firewall={"name": "f1", "project": "p", "allows": []},
                    ),
                )
            ),
            after_apis,
        )
        image = WorkerImage(
            "img",
            WorkerImageArgs(
                repository={"repository_id": "r", "format": "DOCKER"},
                uri="u:1",
                build_script="true",
                source_dir=Path("/src"),
            ),
            after_apis,
        )
        slices = TpuSlices(
            "tpu",
            TpuSlicesArgs(
                pools=(
                    TpuPoolArgs({"name": "held", "cluster": "c"}, autoscales=False),
                    TpuPoolArgs({"name": "scaling", "cluster": "c"}, autoscales=True),
                ),
                compute_class=None,
                kubernetes=NO_PROVIDER,
            ),
            pulumi.ResourceOptions(depends_on=[networks]),
        )
        return {"image": image.image, "pools": slices.pool_names, "networks": networks.network_names}

    run = run_program(program, {})
    assert run.outputs == {"image": "u:1", "pools": ["held", "scaling"], "networks": ["n1"]}
    service = _by_name(run, "apis-compute").urn
    network = _by_name(run, "dcn-net-1")
    assert _by_name(run, "dcn-subnet-1").inputs["network"] == f"{network.name}-id"
    assert _by_name(run, "dcn-net-1-allow-internal").inputs["network"] == f"{network.name}-id"
    for child in ("dcn-net-1", "dcn-subnet-1", "dcn-net-1-allow-internal", "img-repository", "img-build"):
        assert service in _by_name(run, child).dependencies, child
    assert _by_name(run, "img-repository").urn in _by_name(run, "img-build").dependencies
    under_networks = {r.urn for r in run.registrations if r.name.startswith("dcn-")}
    for pool, create_timeout in (("tpu-0", "150m"), ("tpu-1", "")):
        registration = _by_name(run, pool)
        assert under_networks <= set(registration.dependencies), pool
        assert registration.delete_before_replace
        assert registration.custom_timeouts["create"] == create_timeout, pool
        assert registration.custom_timeouts["update"] == "60m", pool
    assert run.of_type(POOL) and all(r.inputs["cluster"] == "c" for r in run.of_type(POOL))
