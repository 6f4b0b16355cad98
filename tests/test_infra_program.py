"""The infra program under Pulumi mocks: every flag of the manual procedure on the right resource,
scaling with the slice count, wiring and ordering, and bad config stopping everything."""

from __future__ import annotations

import re
from typing import Any

import pytest

from domain.config import settings as settings_module
from domain.config.settings import SettingsError
from domain.config.stack_outputs import STACK_OUTPUTS
from domain.resources import kuberay
from infra.config import read_settings
from infra.program import build
from tests.support.infra_program import run_infra
from tests.support.pulumi_harness import FAKE_PROJECT_NUMBER, RecordingMonitor, run_program, stack_config

PROJECT = "my-gcp-project"  # Pulumi.dev.yaml
ZONE, REGION = "us-east5-b", "us-east5"

NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
KSA = "kubernetes:core/v1:ServiceAccount"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
CLAIM_TEMPLATE = "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"
COMPUTE_CLASS = "kubernetes:cloud.google.com/v1:ComputeClass"
CRD_WAIT = "pulumi-python:dynamic/kubernetes:CrdEstablished"


def value_at(inputs: dict[str, Any], path: str) -> Any:
    """`a.b[0].c` into nested dicts and lists."""
    node: Any = inputs
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    return node


def find(run, type_token: str, name: str | None = None):
    candidates = [r for r in run.of_type(type_token) if name is None or r.inputs.get("name") == name]
    assert len(candidates) == 1, f"{type_token} named {name}: found {[c.inputs.get('name') for c in candidates]}"
    return candidates[0]


PRINCIPAL = (
    f"principal://iam.googleapis.com/projects/{FAKE_PROJECT_NUMBER}/locations/global/workloadIdentityPools/"
    f"{PROJECT}.svc.id.goog/subject/ns/default/sa/maxtext-ray"
)

# (procedure step and flag, resource type, resource name, input path, expected value)
STANDARD_PROCEDURE = [
    ("net create --subnet-mode=custom", NETWORK, "maxtext-tpu-net-1", "autoCreateSubnetworks", False),
    ("net create --mtu=8896", NETWORK, "maxtext-tpu-net-1", "mtu", 8896),
    ("net create --subnet-mode=custom", NETWORK, "maxtext-tpu-net-2", "autoCreateSubnetworks", False),
    ("net create --mtu=8896", NETWORK, "maxtext-tpu-net-2", "mtu", 8896),
    ("subnets create tpu-subnet-1 --range", SUBNET, "tpu-subnet-1", "ipCidrRange", "10.50.0.0/16"),
    ("subnets create tpu-subnet-1 --region", SUBNET, "tpu-subnet-1", "region", REGION),
    ("subnets create tpu-subnet-2 --range", SUBNET, "tpu-subnet-2", "ipCidrRange", "10.60.0.0/16"),
    ("subnets create tpu-subnet-2 --region", SUBNET, "tpu-subnet-2", "region", REGION),
    (
        "(missing in procedure) DCN ingress",
        FIREWALL,
        "maxtext-tpu-net-1-allow-internal",
        "sourceRanges",
        ["10.50.0.0/16"],
    ),
    (
        "(missing in procedure) DCN ingress",
        FIREWALL,
        "maxtext-tpu-net-2-allow-internal",
        "sourceRanges",
        ["10.60.0.0/16"],
    ),
    ("clusters create --location=ZONE", CLUSTER, "maxtext-tpu", "location", ZONE),
    ("clusters create --cluster-version", CLUSTER, "maxtext-tpu", "minMasterVersion", "1.35.2-gke.1842000"),
    (
        "clusters create --addons=RayOperator",
        CLUSTER,
        "maxtext-tpu",
        "addonsConfig.rayOperatorConfigs[0].enabled",
        True,
    ),
    (
        "clusters create --addons=GcsFuseCsiDriver",
        CLUSTER,
        "maxtext-tpu",
        "addonsConfig.gcsFuseCsiDriverConfig.enabled",
        True,
    ),
    ("clusters create --enable-dataplane-v2", CLUSTER, "maxtext-tpu", "datapathProvider", "ADVANCED_DATAPATH"),
    (
        "clusters create --workload-pool",
        CLUSTER,
        "maxtext-tpu",
        "workloadIdentityConfig.workloadPool",
        f"{PROJECT}.svc.id.goog",
    ),
    ("teardown works by default", CLUSTER, "maxtext-tpu", "deletionProtection", False),
    (
        "clusters create --machine-type=n1-standard-16",
        POOL,
        "ray-head-pool",
        "nodeConfig.machineType",
        "n1-standard-16",
    ),
    ("head pool on-demand (not Spot)", POOL, "ray-head-pool", "nodeConfig.spot", False),
    *[
        row
        for pool in ("v6e-16-0", "v6e-16-1")
        for row in [
            ("node-pools create --location", POOL, pool, "location", ZONE),
            ("node-pools create --node-locations", POOL, pool, "nodeLocations", [ZONE]),
            ("node-pools create --machine-type", POOL, pool, "nodeConfig.machineType", "ct6e-standard-4t"),
            (
                "node-pools create --threads-per-core=1",
                POOL,
                pool,
                "nodeConfig.advancedMachineFeatures.threadsPerCore",
                1,
            ),
            ("node-pools create --tpu-topology=4x4", POOL, pool, "placementPolicy.tpuTopology", "4x4"),
            ("node-pools create (multi-host slice placement)", POOL, pool, "placementPolicy.type", "COMPACT"),
            # minSlices = 0 by default: each slice scales 0 <-> 4 VMs, with no count of its own.
            (
                "node-pools create --enable-autoscaling --total-min-nodes=0",
                POOL,
                pool,
                "autoscaling.totalMinNodeCount",
                0,
            ),
            ("node-pools create --total-max-nodes=4", POOL, pool, "autoscaling.totalMaxNodeCount", 4),
            (
                "node-pools create --additional-node-network net-1",
                POOL,
                pool,
                "networkConfig.additionalNodeNetworkConfigs[0]",
                {"network": "maxtext-tpu-net-1", "subnetwork": "tpu-subnet-1"},
            ),
            (
                "node-pools create --additional-node-network net-2",
                POOL,
                pool,
                "networkConfig.additionalNodeNetworkConfigs[1]",
                {"network": "maxtext-tpu-net-2", "subnetwork": "tpu-subnet-2"},
            ),
            (
                "node-pools create --node-labels (DRANET)",
                POOL,
                pool,
                "nodeConfig.labels",
                {"cloud.google.com/gke-networking-dra-driver": "true"},
            ),
            ("node-pools create --enable-gvnic", POOL, pool, "nodeConfig.gvnic.enabled", True),
            (
                "node-pools create --scopes",
                POOL,
                pool,
                "nodeConfig.oauthScopes",
                ["https://www.googleapis.com/auth/cloud-platform"],
            ),
            ("Workload Identity on TPU nodes", POOL, pool, "nodeConfig.workloadMetadataConfig.mode", "GKE_METADATA"),
            ("on-demand unless spot is set", POOL, pool, "nodeConfig.spot", False),
        ]
    ],
    ("buckets create --default-storage-class=STANDARD", BUCKET, None, "storageClass", "STANDARD"),
    ("buckets create --location=REGION", BUCKET, None, "location", "US-EAST5"),
    ("buckets create (uniform access)", BUCKET, None, "uniformBucketLevelAccess", True),
    ("buckets create (no public access)", BUCKET, None, "publicAccessPrevention", "enforced"),
    ("add-iam-policy-binding --role", BUCKET_IAM, None, "role", "roles/storage.objectUser"),
    ("add-iam-policy-binding --member", BUCKET_IAM, None, "member", PRINCIPAL),
    ("kubectl create serviceaccount", KSA, None, "metadata", {"name": "maxtext-ray", "namespace": "default"}),
]


@pytest.fixture(scope="module")
def standard_run():
    return run_infra(stack_config("dev"))


@pytest.fixture(scope="module")
def autopilot_run():
    config = stack_config("dev")
    config["maxtext-tpu-infra:mode"] = "autopilot"
    return run_infra(config)


@pytest.mark.parametrize(
    "step, type_token, name, path, expected",
    STANDARD_PROCEDURE,
    ids=[f"{row[0]}:{row[2]}" for row in STANDARD_PROCEDURE],
)
def test_standard_mode_has_every_flag_of_the_procedure(standard_run, step, type_token, name, path, expected):
    assert value_at(find(standard_run, type_token, name).inputs, path) == expected, step


AUTOPILOT_PROCEDURE = [
    ("clusters create-auto", CLUSTER, "maxtext-tpu", "enableAutopilot", True),
    ("clusters create-auto --location=REGION", CLUSTER, "maxtext-tpu", "location", REGION),
    ("clusters create-auto --cluster-version", CLUSTER, "maxtext-tpu", "minMasterVersion", "1.35.2-gke.1842000"),
    (
        "clusters create-auto --enable-ray-operator",
        CLUSTER,
        "maxtext-tpu",
        "addonsConfig.rayOperatorConfigs[0].enabled",
        True,
    ),
    ("teardown works by default", CLUSTER, "maxtext-tpu", "deletionProtection", False),
    ("buckets create --default-storage-class=STANDARD", BUCKET, None, "storageClass", "STANDARD"),
    ("add-iam-policy-binding --member", BUCKET_IAM, None, "member", PRINCIPAL),
]


@pytest.mark.parametrize(
    "step, type_token, name, path, expected", AUTOPILOT_PROCEDURE, ids=[row[0] for row in AUTOPILOT_PROCEDURE]
)
def test_autopilot_mode_has_every_flag_of_the_procedure(autopilot_run, step, type_token, name, path, expected):
    assert value_at(find(autopilot_run, type_token, name).inputs, path) == expected, step


def test_autopilot_has_no_node_pools_or_extra_networks_but_a_dranet_compute_class(autopilot_run):
    assert autopilot_run.of_type(POOL) == []
    assert autopilot_run.of_type(NETWORK) == []
    cluster = find(autopilot_run, CLUSTER).inputs
    for standard_only in ("datapathProvider", "removeDefaultNodePool", "initialNodeCount", "workloadIdentityConfig"):
        assert standard_only not in cluster, standard_only
    compute_class = autopilot_run.one(COMPUTE_CLASS).inputs
    assert compute_class["spec"]["nodePoolConfig"] == {"dra": {"networking": {"enabled": True}}}
    assert compute_class["spec"]["priorities"][0]["machineType"] == "ct6e-standard-4t"


def test_autopilot_workers_are_not_privileged_and_use_the_compute_class(autopilot_run):
    worker = autopilot_run.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert "securityContext" not in worker["containers"][0]
    assert worker["nodeSelector"]["cloud.google.com/compute-class"] == "dranet-compute-class"
    claim = autopilot_run.one(CLAIM_TEMPLATE).inputs["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert claim["allocationMode"] == "All"


@pytest.mark.parametrize("slices", [1, 2, 4, 16])
def test_standard_scales_one_pool_and_one_replica_per_slice(slices):
    config = stack_config("dev")
    config["maxtext-tpu-infra:slices"] = slices
    run = run_infra(config)
    tpu_pools = sorted(r.inputs["name"] for r in run.of_type(POOL) if r.inputs["name"] != "ray-head-pool")
    assert tpu_pools == sorted(f"v6e-16-{index}" for index in range(slices))
    assert all(find(run, POOL, name).inputs["autoscaling"]["totalMaxNodeCount"] == 4 for name in tpu_pools)
    group = run.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]
    # Up to one replica per slice: the autoscaler brings them up for a job (minSlices 0 by default).
    assert (group["maxReplicas"], group["numOfHosts"]) == (slices, 4)
    env = {item["name"]: item["value"] for item in group["template"]["spec"]["containers"][0]["env"]}
    assert env["MEGASCALE_NUM_SLICES"] == str(slices)
    assert run.outputs["totalChips"] == 16 * slices
    assert run.outputs["tpuPools"] == [f"v6e-16-{index}" for index in range(slices)]
    # The DCN networks are per NIC, not per slice.
    assert sorted(r.name for r in run.of_type(NETWORK)) == ["dcn-net-1", "dcn-net-2"]


@pytest.mark.parametrize("slices", [1, 2, 4, 16])
def test_autopilot_scales_replicas_without_pools(slices):
    config = stack_config("dev")
    config.update({"maxtext-tpu-infra:mode": "autopilot", "maxtext-tpu-infra:slices": slices})
    run = run_infra(config)
    assert run.of_type(POOL) == []
    assert run.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["maxReplicas"] == slices


def test_larger_topology_changes_hosts_per_slice(monkeypatch):
    # The wiring of a topology, apart from the preset's mesh: the shipped presets' meshes span 16
    # chips, so the settings refuse 4x8 for them (tests/test_settings_refusals.py).
    monkeypatch.setattr(settings_module, "_mesh_problems", lambda *args: [])
    config = stack_config("dev")
    config["maxtext-tpu-infra:topology"] = "4x8"
    run = run_infra(config)
    pool = find(run, POOL, "v6e-32-0").inputs
    assert (pool["autoscaling"]["totalMaxNodeCount"], pool["placementPolicy"]["tpuTopology"]) == (8, "4x8")
    assert run.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["numOfHosts"] == 8


def test_spot_and_reservation_reach_the_tpu_pools():
    config = stack_config("dev")
    config.update({"maxtext-tpu-infra:capacity": ["spot"]})
    spot_pool = find(run_infra(config), POOL, "v6e-16-0").inputs
    assert spot_pool["nodeConfig"]["spot"] is True
    # The extended shutdown grace period reaches the engine under the API's names (docs/spot.md).
    assert spot_pool["nodeConfig"]["kubeletConfig"] == {
        "shutdownGracePeriodSeconds": 120,
        "shutdownGracePeriodCriticalPodsSeconds": 15,
    }
    config = stack_config("dev")
    config.update(
        {"maxtext-tpu-infra:capacity": ["reservation"], "maxtext-tpu-infra:reservation": "my-v6e-reservation"}
    )
    reserved = find(run_infra(config), POOL, "v6e-16-0").inputs["nodeConfig"]["reservationAffinity"]
    assert reserved == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["my-v6e-reservation"],
    }


def test_every_resource_is_parented_to_a_component(standard_run):
    components = {r.urn: r for r in standard_run.registrations if not r.custom}
    for component in components.values():
        assert len(component.type.split(":")) == 3 and component.type.startswith("maxtext-tpu:")
    for resource in standard_run.registrations:
        if resource.custom:
            assert resource.parent in components, f"{resource.type} {resource.name} is not in a component"


def test_children_are_named_after_their_component(standard_run):
    for resource in standard_run.registrations:
        if resource.custom:
            assert resource.name.startswith(standard_run.by_urn(resource.parent).name), resource.name


def test_bucket_binding_waits_for_the_cluster(standard_run):
    cluster = find(standard_run, CLUSTER)
    assert cluster.urn in find(standard_run, BUCKET_IAM).dependencies


def test_the_checkpoint_bucket_is_hierarchical_only_when_the_stack_asks(standard_run):
    """bucketHierarchicalNamespace reaches the engine as the bucket's hierarchicalNamespace, with
    uniform access as Cloud Storage requires; a stack without it sends no namespace at all, as
    before the setting, so no existing stack's bucket is replaced (the provider replaces a bucket
    whose namespace changes)."""
    assert "hierarchicalNamespace" not in find(standard_run, BUCKET).inputs
    config = stack_config("dev")
    config["maxtext-tpu-infra:bucketHierarchicalNamespace"] = "true"
    bucket = find(run_infra(config), BUCKET).inputs
    assert bucket["hierarchicalNamespace"] == {"enabled": True}
    assert bucket["uniformBucketLevelAccess"] is True


def test_tpu_pools_replace_delete_first_and_wait_for_stockouts():
    """Only a held slice's create waits for its VMs (a stockout can last 2 hours); a pool that
    scales from zero is created empty, so its create keeps the provider's timeout."""
    config = stack_config("dev")
    config["maxtext-tpu-infra:minSlices"] = 1
    run = run_infra(config)
    cluster = find(run, CLUSTER)
    for pool, create_timeout in (("v6e-16-0", "150m"), ("v6e-16-1", "")):
        registration = find(run, POOL, pool)
        assert registration.delete_before_replace
        assert cluster.urn in registration.dependencies
        assert registration.custom_timeouts["create"] == create_timeout, pool
        assert registration.custom_timeouts["update"] == "60m", pool


def test_ray_cluster_waits_for_crd_identity_capacity_and_claims(standard_run):
    ray_cluster = standard_run.one(RAY_CLUSTER)
    for dependency in (CRD_WAIT, KSA, BUCKET_IAM, CLAIM_TEMPLATE):
        assert standard_run.one(dependency).urn in ray_cluster.dependencies, dependency
    for pool in ("v6e-16-0", "v6e-16-1"):
        assert find(standard_run, POOL, pool).urn in ray_cluster.dependencies


def waits_for(run, resource) -> set[str]:
    """The URNs of every resource `resource` is created after: its own dependencies and its
    ancestors' (a child registers once its component has, and a component's registration waits
    for its dependencies), and theirs in turn."""
    registered = {r.urn: r for r in run.registrations}  # the stack itself is not recorded
    seen: set[str] = set()
    pending = [resource]
    while pending:
        node = pending.pop()
        while node is not None:
            for urn in set(node.dependencies) - seen:
                seen.add(urn)
                pending.append(registered[urn])
            node = registered.get(node.parent)
    return seen


# Which components each component waits for (infra/program.py): depending on a component is
# depending on every resource under it.
COMPONENT_DEPENDENCIES = {
    "maxtext-tpu:project:ProjectApis": set(),
    "maxtext-tpu:network:DcnNetworks": {"maxtext-tpu:project:ProjectApis"},
    "maxtext-tpu:cluster:GkeCluster": {"maxtext-tpu:project:ProjectApis"},
    "maxtext-tpu:image:WorkerImage": {"maxtext-tpu:project:ProjectApis"},
    "maxtext-tpu:tpu:TpuSlices": {"maxtext-tpu:cluster:GkeCluster"},
    "maxtext-tpu:storage:CheckpointStorage": {"maxtext-tpu:project:ProjectApis", "maxtext-tpu:cluster:GkeCluster"},
    "maxtext-tpu:ray:KubeRay": {
        "maxtext-tpu:cluster:GkeCluster",
        "maxtext-tpu:storage:CheckpointStorage",
        "maxtext-tpu:tpu:TpuSlices",
    },
}


@pytest.mark.parametrize("run_name", ["standard_run", "autopilot_run"])
def test_components_wait_for_the_components_they_use_and_so_do_their_children(request, run_name):
    run = request.getfixturevalue(run_name)
    components = {r.type: r for r in run.registrations if not r.custom}
    assert set(components) <= set(COMPONENT_DEPENDENCIES)

    def under(component) -> set[str]:
        return {r.urn for r in run.registrations if r.custom and r.parent == component.urn}

    for type_token, component in components.items():
        expected = set().union(*[under(components[used]) for used in COMPONENT_DEPENDENCIES[type_token]])
        assert set(component.dependencies) == expected, type_token
        for child in run.registrations:
            if child.parent == component.urn:
                # Recorded on the child itself, where the stack's state and the policies read it.
                assert expected <= set(child.dependencies), (type_token, child.name)


@pytest.mark.parametrize("run_name", ["standard_run", "autopilot_run"])
def test_every_resource_waits_for_every_api(request, run_name):
    run = request.getfixturevalue(run_name)
    services = {s.urn for s in run.of_type("gcp:projects/service:Service")}
    for resource in run.registrations:
        if resource.custom and resource.urn not in services:
            assert services <= waits_for(run, resource), resource.name


def test_the_ray_cluster_waits_for_everything_its_pods_use(standard_run):
    ray_cluster = standard_run.one(RAY_CLUSTER)
    needed = {
        standard_run.one(t).urn
        for t in (CLUSTER, CRD_WAIT, KSA, BUCKET, BUCKET_IAM, CLAIM_TEMPLATE, "command:local:Command")
    }
    needed |= {r.urn for r in standard_run.of_type(POOL)}  # the head's and every slice's
    assert needed <= waits_for(standard_run, ray_cluster)


def test_kubernetes_objects_use_the_explicit_provider(standard_run):
    provider = standard_run.one("pulumi:providers:kubernetes")
    for resource in standard_run.registrations:
        if resource.type.startswith("kubernetes:"):
            assert resource.provider.startswith(provider.urn + "::"), resource.type


def test_kubeconfig_holds_no_credential(standard_run):
    kubeconfig = standard_run.outputs["kubeconfig"]
    user = kubeconfig["users"][0]["user"]
    assert set(user) == {"exec"} and user["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert kubeconfig["clusters"][0]["cluster"]["server"].startswith("https://")
    crd_wait = standard_run.one(CRD_WAIT).inputs
    assert crd_wait["kubeconfig"] == kubeconfig and crd_wait["crd_name"] == "rayclusters.ray.io"


def test_apis_are_enabled_and_never_disabled_on_destroy(standard_run):
    services = standard_run.of_type("gcp:projects/service:Service")
    assert {s.inputs["service"] for s in services} >= {"container.googleapis.com", "compute.googleapis.com"}
    assert all(s.inputs["disableOnDestroy"] is False for s in services)
    # The first resources to call each API wait for every API to be enabled (the SDK expands a
    # dependency on the ProjectApis component into its children).
    for type_token in (CLUSTER, NETWORK, BUCKET, "gcp:serviceaccount/account:Account"):
        for resource in standard_run.of_type(type_token):
            assert {s.urn for s in services} <= set(resource.dependencies), resource.name


STABLE_OUTPUTS = {
    "clusterName": "maxtext-tpu",
    "namespace": "default",
    "rayClusterName": "maxtext-tpu-cluster",
    "headServiceName": "maxtext-tpu-cluster-head-svc",
    "dashboardPort": 8265,
    "checkpointRoot": "/data",
    "preset": "llama3-8b",
    "slices": 2,
    "topology": "4x4",
    "accelerator": "v6e",
    "totalChips": 32,
    "pricePerChipHourUsd": 2.70,
    "capacity": ["on-demand"],
    "minSlices": 0,
    "trainingDollarsPerHour": 86.40,
    "idleDollarsPerHour": 0.0,
    "idleDollarsPerDay": 0.0,
}


def test_stack_outputs_for_the_workloads_project(standard_run):
    for name, expected in STABLE_OUTPUTS.items():
        assert standard_run.outputs[name] == expected, name
    for name in (
        "clusterEndpoint",
        "clusterCaCertificate",
        "bucketName",
        "serviceAccount",
        "clusterLocation",
        "clusterId",
        "rayAuthSecret",
    ):
        assert standard_run.outputs[name], name


# What a value of each declared type of output is (a number is null where no price is known).
KIND_VALUES = {"string": str, "integer": int, "number": (float, type(None)), "array": list, "object": dict}
# Outputs that are null on a stack without datasetBucket.
DATASET_OUTPUTS = ("datasetRoot", "datasetUri")
DATASET = {"datasetBucket": "acme-corpus", "datasetPrefix": "corpora/web-v1"}


@pytest.fixture(scope="module")
def dataset_run():
    config = stack_config("dev")
    config.update({f"maxtext-tpu-infra:{key}": value for key, value in DATASET.items()})
    return run_infra(config)


@pytest.mark.parametrize("run_name", ["standard_run", "autopilot_run", "dataset_run"])
def test_the_stack_exports_exactly_the_declared_outputs_of_their_declared_types(request, run_name):
    """domain/config/stack_outputs.py declares every output once, and docs/reference.md's table (types included)
    and the workloads reader derive from it: what the program exports is exactly that."""
    outputs = request.getfixturevalue(run_name).outputs
    assert set(outputs) == {entry.name for entry in STACK_OUTPUTS}
    for entry in STACK_OUTPUTS:
        value = outputs[entry.name]
        if entry.name in DATASET_OUTPUTS and run_name != "dataset_run":
            assert value is None, entry.name
            continue
        assert isinstance(value, KIND_VALUES[entry.kind]) and not isinstance(value, bool), (entry.name, value)


def test_the_dataset_outputs_say_where_the_workers_read_it_and_from_which_bucket(dataset_run):
    assert dataset_run.outputs["datasetRoot"] == "/dataset"
    assert dataset_run.outputs["datasetUri"] == "gs://acme-corpus/corpora/web-v1"
    config = stack_config("dev")
    config["maxtext-tpu-infra:datasetBucket"] = "acme-corpus"
    assert run_infra(config).outputs["datasetUri"] == "gs://acme-corpus"


def test_the_dataset_bucket_is_read_only_to_the_pods_principal_and_never_created(dataset_run, standard_run):
    """One grant on the existing dataset bucket: roles/storage.objectViewer, for the principal the
    checkpoint bucket's objectUser goes to, waiting for the cluster like it; no Bucket is created
    for it, and a stack without datasetBucket grants nothing beyond its checkpoint bucket."""
    grants = {grant.inputs["bucket"]: grant for grant in dataset_run.of_type(BUCKET_IAM)}
    checkpoint = find(dataset_run, BUCKET).outputs["name"]
    assert set(grants) == {checkpoint, "acme-corpus"}
    dataset = grants["acme-corpus"]
    assert dataset.name == "checkpoints-dataset-access"
    assert dataset.inputs["role"] == "roles/storage.objectViewer"
    assert dataset.inputs["member"] == grants[checkpoint].inputs["member"] == PRINCIPAL
    assert find(dataset_run, CLUSTER).urn in dataset.dependencies
    assert [bucket.name for bucket in dataset_run.of_type(BUCKET)] == ["checkpoints-bucket"]
    assert [grant.inputs["role"] for grant in standard_run.of_type(BUCKET_IAM)] == ["roles/storage.objectUser"]


@pytest.mark.parametrize("run_name", ["standard_run", "autopilot_run"])
def test_cluster_id_is_the_clusters_full_resource_name(request, run_name):
    """The provider's id of the GKE cluster (the mock engine gives it the real format)."""
    run = request.getfixturevalue(run_name)
    cluster = run.one(CLUSTER).inputs
    outputs = run.outputs
    assert outputs["clusterId"] == (
        f"projects/{cluster['project']}/locations/{cluster['location']}/clusters/{cluster['name']}"
    )
    assert outputs["clusterId"].endswith(f"/locations/{outputs['clusterLocation']}/clusters/{outputs['clusterName']}")


@pytest.mark.parametrize(
    "overrides",
    [
        {"maxtext-tpu-infra:preset": "llama3-405b"},
        {"maxtext-tpu-infra:mode": "hybrid"},
        {"maxtext-tpu-infra:topology": "3x3"},
        {"maxtext-tpu-infra:slices": 0},
        {"maxtext-tpu-infra:slices": 65},
        {"gcp:zone": "europe-west4-a"},
        {"maxtext-tpu-infra:dcnSubnets": ["10.50.0.0/16", "10.50.0.0/20"]},
        {"maxtext-tpu-infra:gkeVersion": "1.33.0-gke.100"},
        {"maxtext-tpu-infra:mode": "autopilot", "maxtext-tpu-infra:gkeVersion": "1.35.1-gke.1"},
        {"maxtext-tpu-infra:slicse": 4},  # a misspelt key is reported, not ignored
    ],
)
def test_bad_config_stops_before_any_resource(overrides):
    config = stack_config("dev")
    config.update(overrides)
    monitor = RecordingMonitor()
    with pytest.raises(SettingsError):
        run_program(lambda: build(read_settings()), config, monitor=monitor)
    assert monitor.registrations == []


def test_cost_outputs_tell_a_training_hour_from_an_idle_one():
    """Spot with one slice kept up: training holds both slices, idle one, at us-east5's Spot price."""
    config = stack_config("dev")
    config.update({"maxtext-tpu-infra:capacity": ["spot"], "maxtext-tpu-infra:minSlices": 1})
    outputs = run_infra(config).outputs
    assert (outputs["capacity"], outputs["minSlices"], outputs["pricePerChipHourUsd"]) == (["spot"], 1, 1.08)
    assert (outputs["trainingDollarsPerHour"], outputs["idleDollarsPerHour"], outputs["idleDollarsPerDay"]) == (
        34.56,
        17.28,
        414.72,
    )
    assert outputs["costBasis"].startswith("spot in us-east5 at $1.08 per chip-hour (")
    assert "onDemandDollarsPerHour" not in outputs  # it priced every stack at on demand, always up


def test_a_capacity_without_a_price_exports_no_dollar_figure():
    config = stack_config("dev")
    config.update({"maxtext-tpu-infra:capacity": ["flex-start"]})
    outputs = run_infra(config).outputs
    assert outputs["pricePerChipHourUsd"] is None and outputs["trainingDollarsPerHour"] is None
    assert (outputs["idleDollarsPerHour"], outputs["idleDollarsPerDay"]) == (0.0, 0.0)  # scaled to zero
    assert "no flex-start list price for TPU v6e in us-east5; set pricePerChipHour" in outputs["costBasis"]


# What decides how a TPU pool's nodes come and go, by capacity choice (the rest of each pool is
# the procedure's, above). A held slice has its count; a scaling one GKE autoscaling from 0 to the
# slice's 4 VMs; flex-start adds what GKE requires of it (domain/resources/gcp_resources.py cites
# it).
HELD = {"nodeCount": 4}
SCALING = {"autoscaling": {"totalMinNodeCount": 0, "totalMaxNodeCount": 4}}
REPAIRED = {"management": {"autoRepair": True, "autoUpgrade": True}}
RESERVED = {
    "consumeReservationType": "SPECIFIC_RESERVATION",
    "key": "compute.googleapis.com/reservation-name",
    "values": ["my-v6e-reservation"],
}
SPOT_KUBELET = {"shutdownGracePeriodSeconds": 120, "shutdownGracePeriodCriticalPodsSeconds": 15}
# (case, settings, the expected shape of pool 0 and of pool 1)
CAPACITY_POOLS = [
    (
        "on-demand, held",
        {"minSlices": 2},
        [{**HELD, **REPAIRED, "spot": False, "flexStart": False}] * 2,
    ),
    (
        "on-demand, one held and one scaling",
        {"minSlices": 1},
        [
            {**HELD, **REPAIRED, "spot": False, "flexStart": False},
            {**SCALING, **REPAIRED, "spot": False, "flexStart": False},
        ],
    ),
    ("on-demand, scaling", {}, [{**SCALING, **REPAIRED, "spot": False, "flexStart": False}] * 2),
    (
        "spot, scaling",
        {"capacity": ["spot"]},
        [{**SCALING, **REPAIRED, "spot": True, "flexStart": False, "kubeletConfig": SPOT_KUBELET}] * 2,
    ),
    (
        "reservation, held",
        {"capacity": ["reservation"], "reservation": "my-v6e-reservation", "minSlices": 2},
        [{**HELD, **REPAIRED, "spot": False, "flexStart": False, "reservationAffinity": RESERVED}] * 2,
    ),
    (
        "flex-start",
        {"capacity": ["flex-start"]},
        [
            {
                "autoscaling": {"totalMinNodeCount": 0, "totalMaxNodeCount": 4, "locationPolicy": "ANY"},
                "management": {"autoRepair": False, "autoUpgrade": True},
                "spot": False,
                "flexStart": True,
                "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"},
            }
        ]
        * 2,
    ),
]


def pool_capacity_shape(inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs that say how a pool gets and keeps its nodes; absent ones are left out."""
    node_config = inputs["nodeConfig"]
    shape = {key: inputs[key] for key in ("nodeCount", "autoscaling", "management") if key in inputs}
    shape.update(
        {
            key: node_config[key]
            for key in ("spot", "flexStart", "reservationAffinity", "kubeletConfig")
            if key in node_config
        }
    )
    return shape


@pytest.mark.parametrize("case, overrides, expected", CAPACITY_POOLS, ids=[row[0] for row in CAPACITY_POOLS])
def test_each_capacity_choice_builds_its_tpu_node_pools(case, overrides, expected):
    config = stack_config("dev")
    config.update({f"maxtext-tpu-infra:{key}": value for key, value in overrides.items()})
    run = run_infra(config)
    pools = sorted(
        (r for r in run.of_type(POOL) if r.inputs["name"] != "ray-head-pool"), key=lambda r: r.inputs["name"]
    )
    assert [r.inputs["name"] for r in pools] == ["v6e-16-0", "v6e-16-1"]
    assert [pool_capacity_shape(r.inputs) for r in pools] == expected, case
    for pool in pools:
        assert pool.inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
        assert pool.inputs["nodeConfig"]["machineType"] == "ct6e-standard-4t"


@pytest.mark.parametrize(
    "overrides",
    [
        {"capacity": ["spot", "on-demand"]},  # a fallback order needs Autopilot's ComputeClass
        {"capacity": ["flex-start"], "minSlices": 1},  # flex-start pools scale from zero
        {"capacity": ["reservation"]},  # no reservation named
        {"minSlices": 3},  # more held slices than slices
    ],
)
def test_capacity_gke_cannot_build_on_standard_stops_before_any_resource(overrides):
    config = stack_config("dev")
    config.update({f"maxtext-tpu-infra:{key}": value for key, value in overrides.items()})
    monitor = RecordingMonitor()
    with pytest.raises(SettingsError):
        run_program(lambda: build(read_settings()), config, monitor=monitor)
    assert monitor.registrations == []


# ---------------------------------------------------------------- scaling and capacity (issue 20)


def infra_run(**settings: Any):
    config = stack_config("dev")
    config.update({f"maxtext-tpu-infra:{key}": value for key, value in settings.items()})
    return run_infra(config)


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_the_ray_cluster_scales_slices_from_min_slices_with_ray_autoscaler_v2(mode):
    spec = infra_run(mode=mode, minSlices=1, idleTimeoutSeconds=600).one(RAY_CLUSTER).inputs["spec"]
    assert spec["enableInTreeAutoscaling"] is True
    options = spec["autoscalerOptions"]
    assert (options["version"], options["idleTimeoutSeconds"], options["upscalingMode"]) == ("v2", 600, "Default")
    group = spec["workerGroupSpecs"][0]
    assert (group["minReplicas"], group["maxReplicas"], group["numOfHosts"]) == (1, 2, 4)
    # Left to the autoscaler: a stated count would be re-applied by every `pulumi up`.
    assert "replicas" not in group


def test_a_stack_keeping_every_slice_up_runs_no_autoscaler():
    spec = infra_run(minSlices=2).one(RAY_CLUSTER).inputs["spec"]
    assert "enableInTreeAutoscaling" not in spec and "autoscalerOptions" not in spec
    group = spec["workerGroupSpecs"][0]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 2)


def test_the_autopilot_compute_class_carries_the_capacity_order_to_the_engine():
    run = infra_run(mode="autopilot", capacity=["reservation", "spot", "flex-start"], reservation="v6e-res")
    spec = run.one(COMPUTE_CLASS).inputs["spec"]
    assert spec["whenUnsatisfiable"] == "DoNotScaleUp"
    assert [{key: p[key] for key in ("reservations", "spot", "flexStart") if key in p} for p in spec["priorities"]] == [
        {"reservations": {"affinity": "Specific", "specific": [{"name": "v6e-res"}]}},
        {"spot": True},
        {"flexStart": {"enabled": True}},
    ]
    assert all(p["tpu"] == {"type": "tpu-v6e-slice", "count": 4, "topology": "4x4"} for p in spec["priorities"])
    worker = run.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["nodeSelector"]["cloud.google.com/compute-class"] == "dranet-compute-class"
    assert "cloud.google.com/gke-spot" not in worker["nodeSelector"]


def test_standard_flex_start_workers_select_flex_start_nodes():
    worker = infra_run(capacity=["flex-start"]).one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]
    assert worker["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-flex-start"] == "true"


@pytest.mark.parametrize(("capacity", "has_class"), [(["spot"], True), (["on-demand"], False)])
def test_the_compute_class_exists_exactly_when_the_workers_select_it(monkeypatch, capacity, has_class):
    # An accelerator without DCN networks (no DRANET; none of the shipped presets): only the
    # capacity choices call for the class, and the pods must not select one that is not there.
    monkeypatch.setattr(kuberay, "uses_dranet", lambda settings: False)
    run = infra_run(mode="autopilot", capacity=capacity)
    selector = run.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]
    assert len(run.of_type(COMPUTE_CLASS)) == int(has_class)
    assert ("cloud.google.com/compute-class" in selector) is has_class
