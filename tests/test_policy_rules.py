"""The policy pack's rules, run offline by `policies.evaluate` on what the real programs register
under Pulumi mocks: every shipped stack passes; every rule fires, alone and naming the resource,
on a stack with one property broken; a rule that cannot read its property (missing, or unknown
as during preview) stays quiet; enforcement levels follow the standard pack config."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationPolicy,
)
from pulumi_policy.proxy import (
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
)

from domain.compile_cache import COMPILE_CACHE_ENV, COMPILE_CACHE_PREFIX
from domain.training.presets import PROCEDURE_OVERRIDES, maxtext_overrides, preset
from policies.check import resources_of
from policies.evaluate import Violation, evaluate, reconcile_config
from policies.rules import ALL, markdown_table
from tests.support.infra_program import run_infra
from tests.support.pulumi_harness import stack_config
from tests.support.workloads_program import run_workloads
from tools.sync_settings import POLICIES, RULES_END, RULES_START, synced_policies

KEEP = object()  # a case broken by its config alone
SIGNATURE_KEY = "4dabf18193072939515e22adb298388d"  # marks a secret, asset or archive value
# String maps: a known map without a key is decided (the DRANET label is absent), unlike a
# property that is not there.
MAP_KEYS = {(key,) for key in ("labels", "resourceLabels", "nodeSelector", "annotations", "limits", "requests")}
# Resource types some rule reads.
READ_TYPES = {
    "gcp:compute/network:Network",
    "gcp:compute/subnetwork:Subnetwork",
    "gcp:compute/firewall:Firewall",
    "gcp:container/cluster:Cluster",
    "gcp:container/nodePool:NodePool",
    "gcp:storage/bucket:Bucket",
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "kubernetes:ray.io/v1:RayCluster",
    "pulumi-python:dynamic/ray:RayJob",
}
RESOURCE_POLICIES = [policy for policy in ALL if isinstance(policy, ResourceValidationPolicy)]
STACK_POLICIES = [policy for policy in ALL if isinstance(policy, StackValidationPolicy)]
WORKER = ("spec", "workerGroupSpecs", 0)
WORKER_POD = (*WORKER, "template", "spec")
WORKER_CONTAINER = (*WORKER_POD, "containers", 0)
HEAD_POD = ("spec", "headGroupSpec", "template", "spec")
HEAD_CONTAINER = (*HEAD_POD, "containers", 0)
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
AUTH_OPTIONS = ("spec", "authOptions")
# Properties whose absence is itself decided: KubeRay reads a RayCluster without authOptions, or
# without its mode, as authentication disabled, so deleting them must fire (see
# test_an_absent_auth_setting_is_read_as_disabled), not stay quiet like other missing properties.
DECIDED_WHEN_MISSING = {(RAY_CLUSTER, AUTH_OPTIONS), (RAY_CLUSTER, (*AUTH_OPTIONS, "mode"))}
# KubeRay reads a RayCluster without enableInTreeAutoscaling as running no autoscaler, and one
# without autoscalerOptions.version as Ray autoscaler v1: for a group that scales, both are decided
# (see test_an_absent_autoscaler_setting_is_read_as_none_or_v1).
AUTOSCALER_OPTIONS = ("spec", "autoscalerOptions")
DECIDED_WHEN_MISSING |= {
    (RAY_CLUSTER, ("spec", "enableInTreeAutoscaling")),
    (RAY_CLUSTER, AUTOSCALER_OPTIONS),
    (RAY_CLUSTER, (*AUTOSCALER_OPTIONS, "version")),
}
ADVISORY_POLICIES = {
    "raycluster-privileged-only-for-tpu",
    "rayjob-hbm-headroom",
    "rayjob-elastic-checkpointing",
    "rayjob-predicted-mfu",
    "rayjob-predicted-cost",
    "tpu-hourly-budget",
    "tpu-idle-budget",
}


# A stack that reads its training data from an existing bucket, with a file cache (issue 27).
DATASET_SETTINGS = {"datasetBucket": "acme-corpus", "datasetPrefix": "corpora/web-v1", "datasetFileCacheMib": "4096"}
# The worker's dataset volume and mount (after the checkpoint volume, and the checkpoint and /dev/shm mounts).
DATASET_CSI = (*WORKER_POD, "volumes", 2, "csi")
DATASET_MOUNT = (*WORKER_CONTAINER, "volumeMounts", 2)
# Kubernetes reads an absent readOnly as read-write: on the dataset mount, its absence is decided
# (see test_a_dataset_mount_without_read_only_is_read_write).
DECIDED_WHEN_MISSING |= {(RAY_CLUSTER, (*DATASET_CSI, "readOnly")), (RAY_CLUSTER, (*DATASET_MOUNT, "readOnly"))}
# The head's too: the job's driver checks the data files there.
DECIDED_WHEN_MISSING |= {
    (RAY_CLUSTER, (*HEAD_POD, "volumes", 2, "csi", "readOnly")),
    (RAY_CLUSTER, (*HEAD_CONTAINER, "volumeMounts", 2, "readOnly")),
}


@pytest.fixture(scope="module")
def shipped() -> dict[str, list[dict[str, Any]]]:
    standard = stack_config("dev")
    autopilot = {**standard, "maxtext-tpu-infra:mode": "autopilot"}
    dataset = {**standard, **{f"maxtext-tpu-infra:{key}": value for key, value in DATASET_SETTINGS.items()}}
    return {
        "infra-standard": resources_of(run_infra(standard)),
        "infra-autopilot": resources_of(run_infra(autopilot)),
        "infra-dataset": resources_of(run_infra(dataset)),
        "workloads-dev": resources_of(run_workloads("dev")[0]),
        "workloads-local": resources_of(run_workloads("local")[0]),
    }


def named(resources: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The resource called `name` (not the project's component of the same name)."""
    [found] = [r for r in resources if r["name"] == name and not r["type"].startswith("maxtext-tpu:")]
    return found


def get_at(node: Any, path: tuple) -> Any:
    for step in path:
        node = node[step]
    return node


def set_at(node: Any, path: tuple, value: Any) -> None:
    get_at(node, path[:-1])[path[-1]] = value


def delete_at(node: Any, path: tuple) -> None:
    del get_at(node, path[:-1])[path[-1]]


def unknown_like(value: Any) -> str:
    """The marker the SDK sends during preview for a value of this type."""
    if isinstance(value, bool):
        return UNKNOWN_BOOLEAN_VALUE
    if isinstance(value, (int, float)):
        return UNKNOWN_NUMBER_VALUE
    if isinstance(value, list):
        return UNKNOWN_ARRAY_VALUE
    if isinstance(value, dict):
        return UNKNOWN_OBJECT_VALUE
    return UNKNOWN_STRING_VALUE


def job_edit(overrides: dict[str, str] | None = None, **fields: Any) -> Callable[[str], str]:
    """Edits the resolved job inside a RayJob entrypoint (`python -m M --job 'JSON'`)."""

    def edit(entrypoint: str) -> str:
        words = shlex.split(entrypoint)
        job = json.loads(words[4])
        job.update(fields)
        job["maxtext_overrides"].update(overrides or {})
        return shlex.join([*words[:4], json.dumps(job, sort_keys=True)])

    return edit


def record_slow_fit_check(resources: list[dict[str, Any]]) -> None:
    """A fit check of exactly the training job's configuration, in this test's fit-check cache,
    predicting the step ten times slower than the 8B anchor's compile: a poor layout."""
    from domain.perf import fit_results
    from domain.perf.hlo_profile import StepProfile
    from policies.rules.rayjob import job_of
    from tests.support.anchors import CALIBRATING_8B, anchor_named
    from tests.support.workloads_program import recorded_fit_check

    job = job_of(named(resources, "training")["props"])
    slow = StepProfile(
        tuple(
            dataclasses.replace(s, matmul_flops=10 * s.matmul_flops)
            for s in anchor_named(CALIBRATING_8B).profile.scopes
        )
    )
    result = dataclasses.replace(recorded_fit_check(job), profile=slow.to_json())
    fit_results.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    (fit_results.CACHE_DIR / f"{fit_results.cache_key(job, fit_results.libtpu_flags(job))}.json").write_text(
        result.to_json()
    )


def without(name: str) -> Callable[[list[dict[str, Any]]], None]:
    def remove(resources: list[dict[str, Any]]) -> None:
        resources.remove(named(resources, name))

    return remove


def add_head_service(resources: list[dict[str, Any]]) -> None:
    """A hand-made Service in front of the Ray head, as a quick dashboard fix would add it."""
    cluster = named(resources, "ray-cluster")
    urn = cluster["urn"].rsplit("::", 1)[0].replace("ray.io/v1:RayCluster", "core/v1:Service")
    resources.append(
        {
            "type": "kubernetes:core/v1:Service",
            "name": "dashboard",
            "urn": f"{urn}::dashboard",
            "provider": cluster["provider"],
            "props": {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "ray-dashboard"},
                "spec": {
                    "type": "ClusterIP",
                    "selector": {"ray.io/cluster": "maxtext-tpu-cluster", "ray.io/node-type": "head"},
                    "ports": [{"port": 8265, "targetPort": 8265}],
                },
            },
        }
    )


# Cases that keep TPU nodes up while idle, for a rule other than the idle budget's.
KEPT_UP_IS_PAID_FOR = {"tpu-idle-budget": {"enforcementLevel": "disabled"}}


@functools.cache
def _flex_start_pool_props() -> dict[str, dict[str, Any]]:
    """The TPU node pools of the dev stack with capacity = flex-start, as the program builds them."""
    config = {**stack_config("dev"), "maxtext-tpu-infra:capacity": ["flex-start"]}
    return {
        r["name"]: r["props"]
        for r in resources_of(run_infra(config))
        if r["type"] == "gcp:container/nodePool:NodePool" and r["props"]["nodeConfig"].get("flexStart")
    }


def flex_start_pools(resources: list[dict[str, Any]]) -> None:
    """The shipped Standard stack with flex-start TPU pools."""
    for name, props in _flex_start_pool_props().items():
        named(resources, name)["props"] = copy.deepcopy(props)


def held_flex_start_pool(resources: list[dict[str, Any]]) -> None:
    """A flex-start pool without autoscaling, as if it could hold its slice."""
    flex_start_pools(resources)
    del named(resources, "tpu-1")["props"]["autoscaling"]


@dataclass(frozen=True)
class Case:
    """One rule broken on one shipped stack: `resource`'s property at `path` set to `value`
    (a function of the old value, or KEEP when `config` alone breaks it), after `change`."""

    policy: str
    stack: str
    resource: str
    path: tuple
    value: Any = KEEP
    config: dict[str, Any] = field(default_factory=dict)
    change: Callable[[list[dict[str, Any]]], None] | None = None
    subject: str | None = "resource"  # whose URN the violation carries; None: the whole stack
    mentions: str | None = None  # text every message must contain (default: resource's name)
    unknown_path: tuple | None = None  # the property the rule cannot decide without (default: path)
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.policy}{'-' + self.label if self.label else ''}"

    def broken(self, shipped: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
        resources = copy.deepcopy(shipped[self.stack])
        if self.change:
            self.change(resources)
        if self.value is not KEEP:
            props = named(resources, self.resource)["props"]
            value = self.value(get_at(props, self.path)) if callable(self.value) else self.value
            set_at(props, self.path, value)
        return resources


def add_cache_writer(resources: list[dict[str, Any]]) -> None:
    """A second job's service account granted write on the checkpoint bucket, which holds the
    first job's compilation cache (a Workload Identity principal, so no other storage rule minds)."""
    grant = copy.deepcopy(named(resources, "checkpoints-checkpoint-access"))
    grant["name"], grant["urn"] = "cache-writer", grant["urn"].rsplit("::", 1)[0] + "::cache-writer"
    grant["props"]["member"] = grant["props"]["member"].replace("/sa/maxtext-ray", "/sa/notebooks")
    resources.append(grant)


def name_the_checkpoint_bucket(resources: list[dict[str, Any]]) -> None:
    """The checkpoint bucket with a name known at preview (as with bucketName set)."""
    named(resources, "checkpoints-bucket")["props"]["name"] = "acme-ckpt"


def cache_in(bucket: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """The worker container's environment with its compilation cache moved to `bucket`."""

    def moved(env: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**variable, "value": f"gs://{bucket}/{COMPILE_CACHE_PREFIX}"}
            if variable.get("name") == COMPILE_CACHE_ENV
            else variable
            for variable in env
        ]

    return moved


STD, AUTO, WDEV, DATA = "infra-standard", "infra-autopilot", "workloads-dev", "infra-dataset"
PROCEDURE_70B = {**maxtext_overrides(preset("llama3-70b"), 2), **PROCEDURE_OVERRIDES["llama3-70b"]}
BF16_FULL_REMAT_70B = {
    **maxtext_overrides(preset("llama3-70b"), 2),
    "remat_policy": "full",
    "decoder_layer_input": "device",
}

CASES = [
    Case("dcn-network-custom-mode", STD, "dcn-net-1", ("autoCreateSubnetworks",), True),
    Case("dcn-network-mtu", STD, "dcn-net-2", ("mtu",), 1460),
    Case(
        "dcn-network-internal-firewall",
        STD,
        "dcn-net-1-allow-internal",
        ("sourceRanges",),
        ["192.168.0.0/16"],
        subject="dcn-net-1",
    ),
    Case("tpu-pool-catalog-shape", STD, "tpu-0", ("nodeCount",), 3),
    Case("tpu-pool-catalog-shape", STD, "tpu-1", ("nodeConfig", "machineType"), "ct6e-standard-8t", label="machine"),
    Case("tpu-pool-compact-placement", STD, "tpu-1", ("placementPolicy", "type"), "TYPE_UNSPECIFIED"),
    # The shipped Standard stack scales each slice from zero (minSlices = 0).
    Case("tpu-pool-catalog-shape", STD, "tpu-1", ("autoscaling", "totalMaxNodeCount"), 3, label="autoscaling-max"),
    Case(
        "tpu-pool-catalog-shape",
        STD,
        "tpu-0",
        ("autoscaling", "totalMinNodeCount"),
        2,
        config=KEPT_UP_IS_PAID_FOR,
        label="autoscaling-min",
    ),
    Case("tpu-pool-catalog-shape", STD, "tpu-1", ("nodeCount",), 4, label="count-beside-autoscaling"),
    Case("tpu-pool-flex-start", STD, "tpu-0", ("nodeConfig", "spot"), True, change=flex_start_pools, label="spot"),
    Case(
        "tpu-pool-flex-start", STD, "tpu-1", ("management", "autoRepair"), True, change=flex_start_pools, label="repair"
    ),
    Case(
        "tpu-pool-flex-start",
        STD,
        "tpu-0",
        ("nodeConfig", "reservationAffinity", "consumeReservationType"),
        "SPECIFIC_RESERVATION",
        change=flex_start_pools,
        label="reservation",
    ),
    Case(
        "tpu-pool-flex-start",
        STD,
        "tpu-1",
        ("autoscaling", "locationPolicy"),
        "BALANCED",
        change=flex_start_pools,
        label="location-policy",
    ),
    Case(
        "tpu-pool-flex-start",
        STD,
        "tpu-0",
        ("autoscaling", "totalMinNodeCount"),
        4,
        config=KEPT_UP_IS_PAID_FOR,
        change=flex_start_pools,
        label="kept-up",
    ),
    Case(
        "tpu-pool-flex-start",
        STD,
        "tpu-1",
        ("nodeCount",),
        4,
        config=KEPT_UP_IS_PAID_FOR,
        change=held_flex_start_pool,
        label="held",
    ),
    Case("tpu-pool-dranet-networks", STD, "tpu-0", ("nodeConfig", "labels"), {}),
    Case(
        "tpu-pool-dranet-networks",
        STD,
        "tpu-1",
        ("networkConfig", "additionalNodeNetworkConfigs"),
        lambda networks: networks[:1],
        label="networks",
    ),
    Case("tpu-pool-gvnic", STD, "tpu-0", ("nodeConfig", "gvnic", "enabled"), False),
    Case("tpu-pool-gke-metadata", STD, "tpu-1", ("nodeConfig", "workloadMetadataConfig", "mode"), "GCE_METADATA"),
    Case("gke-cluster-dranet-version", STD, "maxtext-tpu", ("minMasterVersion",), "1.33.5-gke.1000"),
    # Above the Standard minimum, below Autopilot's.
    Case(
        "gke-cluster-dranet-version", AUTO, "maxtext-tpu", ("minMasterVersion",), "1.35.1-gke.1000", label="autopilot"
    ),
    Case("gke-cluster-workload-identity", STD, "maxtext-tpu", ("workloadIdentityConfig", "workloadPool"), ""),
    Case("gke-cluster-dataplane-v2", STD, "maxtext-tpu", ("datapathProvider",), "LEGACY_DATAPATH"),
    Case("gke-cluster-ray-operator", AUTO, "maxtext-tpu", ("addonsConfig", "rayOperatorConfigs", 0, "enabled"), False),
    Case("gke-cluster-gcs-fuse", STD, "maxtext-tpu", ("addonsConfig", "gcsFuseCsiDriverConfig", "enabled"), False),
    Case(
        "gke-cluster-production-deletion-protection",
        STD,
        "maxtext-tpu",
        ("resourceLabels", "environment"),
        "production",
        unknown_path=("deletionProtection",),
    ),
    Case("storage-bucket-uniform-access", STD, "checkpoints-bucket", ("uniformBucketLevelAccess",), False),
    Case(
        "storage-bucket-public-access-prevention", STD, "checkpoints-bucket", ("publicAccessPrevention",), "inherited"
    ),
    Case("storage-no-public-members", STD, "checkpoints-checkpoint-access", ("member",), "allUsers"),
    Case("storage-no-admin-roles", STD, "checkpoints-checkpoint-access", ("role",), "roles/storage.admin"),
    Case(
        "storage-workload-identity-members",
        STD,
        "checkpoints-checkpoint-access",
        ("member",),
        "serviceAccount:trainer@my-gcp-project.iam.gserviceaccount.com",
    ),
    Case("raycluster-hosts-per-slice", STD, "ray-cluster", (*WORKER, "numOfHosts"), 2),
    Case(
        "raycluster-chips-per-host",
        AUTO,
        "ray-cluster",
        (*WORKER_CONTAINER, "resources", "limits", "google.com/tpu"),
        "8",
    ),
    Case("raycluster-megascale-slices", STD, "ray-cluster", (*WORKER_CONTAINER, "env", 0, "value"), "4"),
    Case(
        "raycluster-images-pinned", STD, "ray-cluster", (*HEAD_CONTAINER, "image"), "rayproject/ray:nightly-py312-tpu"
    ),
    Case(
        "raycluster-privileged-only-for-tpu",
        STD,
        "ray-cluster",
        (*HEAD_CONTAINER, "securityContext"),
        {"privileged": True},
    ),
    Case(
        "raycluster-head-not-on-spot",
        STD,
        "ray-cluster",
        (*HEAD_POD, "nodeSelector", "cloud.google.com/gke-spot"),
        "true",
    ),
    Case(
        "raycluster-head-not-on-spot",
        AUTO,
        "ray-cluster",
        (*HEAD_POD, "nodeSelector", "cloud.google.com/gke-flex-start"),
        "true",
        label="flex-start",
    ),
    # The shipped worker group scales (minReplicas 0 < maxReplicas 2): without its autoscaler, or
    # under v1, no slice comes up. An absent maxReplicas leaves the rule unable to tell.
    Case(
        "raycluster-autoscaler-v2",
        STD,
        "ray-cluster",
        ("spec", "enableInTreeAutoscaling"),
        False,
        unknown_path=(*WORKER, "maxReplicas"),
    ),
    Case(
        "raycluster-autoscaler-v2",
        AUTO,
        "ray-cluster",
        (*AUTOSCALER_OPTIONS, "version"),
        "v1",
        unknown_path=(*WORKER, "maxReplicas"),
        label="v1",
    ),
    Case(
        "raycluster-head-service-cluster-ip",
        AUTO,
        "ray-cluster",
        ("spec", "headGroupSpec", "serviceType"),
        "LoadBalancer",
    ),
    # Without the spec nothing can be told; a spec without authOptions is decided (see
    # DECIDED_WHEN_MISSING).
    Case("raycluster-token-auth", STD, "ray-cluster", (*AUTH_OPTIONS, "mode"), "disabled", unknown_path=("spec",)),
    Case(
        "raycluster-fuse-file-cache-bounded",
        STD,
        "ray-cluster",
        (*HEAD_POD, "volumes", 1, "csi", "volumeAttributes", "mountOptions"),
        "implicit-dirs,file-cache:max-size-mb:-1",
    ),
    Case(
        "raycluster-fuse-file-cache-bounded",
        DATA,
        "ray-cluster",
        (*DATASET_CSI, "volumeAttributes", "mountOptions"),
        lambda options: options.replace("file-cache:max-size-mb:4096", "file-cache:max-size-mb:-1"),
        label="dataset",
    ),
    # An absent readOnly is read-write (DECIDED_WHEN_MISSING): without the driver or the mount's path the rule cannot tell.
    Case(
        "raycluster-dataset-mount-read-only",
        DATA,
        "ray-cluster",
        (*DATASET_CSI, "readOnly"),
        False,
        unknown_path=(*DATASET_CSI, "driver"),
    ),
    Case(
        "raycluster-dataset-mount-read-only",
        DATA,
        "ray-cluster",
        (*DATASET_MOUNT, "readOnly"),
        False,
        unknown_path=(*DATASET_MOUNT, "mountPath"),
        label="mount",
    ),
    Case(
        "storage-dataset-bucket-read-only",
        DATA,
        "checkpoints-dataset-access",
        ("role",),
        "roles/storage.objectUser",
        mentions="'acme-corpus'",
    ),
    # The compilation cache (issue 33): written by another job's principal; in a bucket the stack does not create.
    Case("storage-compile-cache-writers", STD, "cache-writer", ("member",), change=add_cache_writer),
    Case(
        "storage-compile-cache-writers",
        DATA,
        "cache-writer",
        ("member",),
        "principalSet://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p.svc.id.goog/namespace/default",
        change=add_cache_writer,
        label="principal-set",
    ),
    Case(
        "storage-compile-cache-own-bucket",
        STD,
        "ray-cluster",
        (*WORKER_CONTAINER, "env"),
        cache_in("shared-team-cache"),
        change=name_the_checkpoint_bucket,
        mentions="'shared-team-cache' is not a bucket this stack creates",
    ),
    Case(
        "storage-compile-cache-own-bucket",
        DATA,
        "ray-cluster",
        (*WORKER_CONTAINER, "env"),
        cache_in("acme-corpus"),
        mentions="'acme-corpus' is the dataset bucket",
        label="dataset",
    ),
    Case("ray-head-service-not-public", STD, "dashboard", ("spec", "type"), "NodePort", change=add_head_service),
    Case(
        "raycluster-tpu-selectors",
        STD,
        "ray-cluster",
        (*WORKER_POD, "nodeSelector", "cloud.google.com/gke-tpu-accelerator"),
        "tpu-v5-lite-podslice",
    ),
    Case(
        "raycluster-tpu-selectors",
        AUTO,
        "ray-cluster",
        (*WORKER_POD, "nodeSelector", "cloud.google.com/gke-tpu-topology"),
        "3x3",
        label="autopilot",
    ),
    # A job gets maxReplicas slices from the autoscaler: one pool less leaves one pending.
    Case("raycluster-replicas-match-slices", STD, "ray-cluster", (*WORKER, "maxReplicas"), change=without("tpu-1")),
    Case("rayjob-maxtext-mesh", WDEV, "training", ("entrypoint",), job_edit({"dcn_data_parallelism": "3"})),
    Case("rayjob-fits-hbm", WDEV, "training", ("entrypoint",), job_edit(PROCEDURE_70B, preset="llama3-70b")),
    Case("rayjob-hbm-headroom", WDEV, "training", ("entrypoint",), job_edit(BF16_FULL_REMAT_70B, preset="llama3-70b")),
    Case("rayjob-elastic-checkpointing", WDEV, "training", ("entrypoint",), job_edit(elastic=True)),
    Case("rayjob-predicted-mfu", WDEV, "training", ("entrypoint",), change=record_slow_fit_check),
    Case("rayjob-predicted-cost", WDEV, "training", ("entrypoint",), job_edit({"steps": "100000"})),
    # The shipped pools and worker group scale to zero: chips and a training hour are counted at
    # their most (GKE's totalMaxNodeCount, KubeRay's maxReplicas), an idle hour at their fewest.
    Case(
        "tpu-chip-cap",
        STD,
        "tpu-0",
        ("autoscaling", "totalMaxNodeCount"),
        config={"tpu-chip-cap": {"chipCap": 16}},
        subject=None,
    ),
    Case(
        "tpu-chip-cap",
        AUTO,
        "ray-cluster",
        (*WORKER, "maxReplicas"),
        config={"tpu-chip-cap": {"chipCap": 16}},
        subject=None,
        label="autopilot",
    ),
    Case(
        "tpu-hourly-budget",
        STD,
        "tpu-1",
        ("autoscaling", "totalMaxNodeCount"),
        config={"tpu-hourly-budget": {"budgetDollarsPerHour": 50}},
        subject=None,
    ),
    Case("tpu-idle-budget", STD, "tpu-0", ("autoscaling", "totalMinNodeCount"), 4, subject=None),
    Case("tpu-idle-budget", AUTO, "ray-cluster", (*WORKER, "minReplicas"), 1, subject=None, label="autopilot"),
    Case(
        "allowed-regions",
        STD,
        "dcn-subnet-1",
        ("region",),
        "europe-west4",
        config={"allowed-regions": {"allowedRegions": ["us-east5"]}},
    ),
    Case(
        "allowed-regions",
        AUTO,
        "checkpoints-bucket",
        ("location",),
        "EU",
        config={"allowed-regions": {"allowedRegions": ["us-east5"]}},
        label="multi-region",
    ),
]


def _ids(cases: list[Case]) -> list[str]:
    return [case.id for case in cases]


@pytest.mark.parametrize(
    "stack", ["infra-standard", "infra-autopilot", "infra-dataset", "workloads-dev", "workloads-local"]
)
def test_every_shipped_stack_passes(shipped, stack):
    assert evaluate(shipped[stack]) == []


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_each_rule_fires_alone_on_a_stack_built_to_break_it(shipped, case):
    resources = case.broken(shipped)
    violations = evaluate(resources, case.config)
    assert {v.policy_name for v in violations} == {case.policy}, violations
    expected_level = "advisory" if case.policy in ADVISORY_POLICIES else "mandatory"
    subject = case.resource if case.subject == "resource" else case.subject
    expected_urn = named(resources, subject)["urn"] if subject else None
    mentions = case.mentions or f"'{subject or case.resource}'"
    for violation in violations:
        assert violation.enforcement_level == expected_level
        assert violation.urn == expected_urn
        assert mentions in violation.message, violation.message
        assert violation.message.endswith(".") and len(violation.message.split(". ")) >= 2


@pytest.mark.parametrize("how", ["missing", "unknown"])
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_a_rule_that_cannot_read_its_property_stays_quiet(shipped, case, how):
    """As during preview: the property is absent, or the SDK's unknown marker."""
    resources = case.broken(shipped)
    props = named(resources, case.resource)["props"]
    path = case.unknown_path or case.path
    if how == "missing":
        delete_at(props, path)
    else:
        set_at(props, path, unknown_like(get_at(props, path)))
    assert evaluate(resources, case.config) == []


@pytest.mark.parametrize("level", ["disabled", "advisory", "mandatory"])
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_enforcement_level_overrides_through_the_pack_config(shipped, case, level):
    config = copy.deepcopy(case.config)
    config.setdefault(case.policy, {})["enforcementLevel"] = level
    violations = evaluate(case.broken(shipped), config)
    if level == "disabled":
        assert violations == []
    else:
        assert violations and {v.enforcement_level for v in violations} == {level}


def test_all_sets_every_level_and_a_policy_entry_wins(shipped):
    case = next(c for c in CASES if c.policy == "storage-no-public-members")
    resources = case.broken(shipped)
    assert evaluate(resources, {"all": "disabled"}) == []
    assert {v.enforcement_level for v in evaluate(resources, {"all": "advisory"})} == {"advisory"}
    override = {"all": "disabled", case.policy: {"enforcementLevel": "mandatory"}}
    assert {(v.policy_name, v.enforcement_level) for v in evaluate(resources, override)} == {(case.policy, "mandatory")}
    # The analyzer reports what a remediation left behind as mandatory.
    assert {v.enforcement_level for v in evaluate(resources, {case.policy: "remediate"})} == {"mandatory"}


def test_every_policy_is_described_with_an_explicit_level_and_has_a_firing_case():
    names = [policy.name for policy in ALL]
    assert len(names) == len(set(names))
    for policy in ALL:
        assert isinstance(policy, (ResourceValidationPolicy, StackValidationPolicy))
        assert policy.description.endswith("."), policy.name
        assert policy.enforcement_level in (EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY)
        expected = "advisory" if policy.name in ADVISORY_POLICIES else "mandatory"
        assert policy.enforcement_level.value == expected, policy.name
    assert {case.policy for case in CASES} == set(names)


def test_config_defaults_come_from_the_schemas():
    settings = reconcile_config(ALL, None)
    assert settings["tpu-chip-cap"] == (EnforcementLevel.MANDATORY, {"chipCap": 64})
    assert settings["tpu-hourly-budget"] == (EnforcementLevel.ADVISORY, {"budgetDollarsPerHour": 200})
    assert settings["allowed-regions"] == (EnforcementLevel.MANDATORY, {"allowedRegions": []})
    configured = reconcile_config(ALL, {"tpu-chip-cap": {"chipCap": 128}})
    assert configured["tpu-chip-cap"] == (EnforcementLevel.MANDATORY, {"chipCap": 128})


@pytest.mark.parametrize(
    "config, message",
    [
        ({"tpu-chip-kap": {"chipCap": 1}}, "unknown policies"),
        ({"tpu-chip-cap": "strict"}, "is not one of"),
        ({"tpu-chip-cap": {"chipCap": "many"}}, "is not of type integer"),
        ({"tpu-chip-cap": {"chipCap": 1.5}}, "is not of type integer"),
        ({"allowed-regions": {"allowedRegions": "us-east5"}}, "is not of type array"),
        ({"tpu-chip-cap": {"chips": 1}}, "has no config property 'chips'"),
    ],
)
def test_bad_policy_config_is_refused(config, message):
    with pytest.raises(ValueError, match=message):
        evaluate([], config)


def test_the_chip_cap_counts_what_the_stack_provisions(shipped):
    """2 slices x 16 chips on both modes: pools on Standard, the worker group on Autopilot."""
    for stack in ("infra-standard", "infra-autopilot"):
        assert evaluate(shipped[stack], {"tpu-chip-cap": {"chipCap": 32}}) == []
        [violation] = evaluate(shipped[stack], {"tpu-chip-cap": {"chipCap": 31}})
        assert "32 TPU chips" in violation.message


def test_the_budget_prices_the_chips_from_the_catalog(shipped):
    assert evaluate(shipped["infra-standard"], {"tpu-hourly-budget": {"budgetDollarsPerHour": 86.40}}) == []
    [violation] = evaluate(shipped["infra-standard"], {"tpu-hourly-budget": {"budgetDollarsPerHour": 86}})
    assert "$86.40 an hour" in violation.message


def test_a_missing_firewall_is_reported_on_its_network(shipped):
    resources = copy.deepcopy(shipped["infra-standard"])
    without("dcn-net-2-allow-internal")(resources)
    [violation] = evaluate(resources)
    assert violation.policy_name == "dcn-network-internal-firewall"
    assert violation.urn == named(resources, "dcn-net-2")["urn"] and "10.60.0.0/16" in violation.message


def test_a_firewall_is_matched_to_its_network_by_id_without_dependencies(shipped):
    """The provider's outputs name the network by id; with neither that nor dependencies (as
    bare mock inputs give it) the rule cannot tell and stays quiet."""
    resources = copy.deepcopy(shipped["infra-standard"])
    for resource in resources:
        resource.pop("dependencies")
    without("dcn-net-1-allow-internal")(resources)
    assert evaluate(resources) == []
    named(resources, "dcn-net-2-allow-internal")["props"]["network"] = (
        "projects/my-gcp-project/global/networks/maxtext-tpu-net-2"
    )
    [violation] = evaluate(resources)
    assert violation.urn == named(resources, "dcn-net-1")["urn"]


@pytest.mark.parametrize(
    "sources, allowed",
    [
        (["fd00::/8", "10.0.0.0/8"], True),  # the IPv4 range covers the subnet; the IPv6 one cannot
        (["::/0"], False),  # every IPv6 address, none of the IPv4 subnet
        (["10.60.0.0/17"], False),  # half the subnet
    ],
)
def test_a_firewall_allows_a_subnet_only_from_ranges_of_its_ip_version(shipped, sources, allowed):
    resources = copy.deepcopy(shipped["infra-standard"])
    named(resources, "dcn-net-2-allow-internal")["props"]["sourceRanges"] = sources
    names = [v.policy_name for v in evaluate(resources)]
    assert names == ([] if allowed else ["dcn-network-internal-firewall"])


@pytest.mark.parametrize(
    "image, pinned",
    [
        ("rayproject/ray:2.60.0-py312-tpu", True),
        ("us-docker.pkg.dev/p/r/maxtext-ray@sha256:" + "a" * 64, True),
        ("localhost:5000/maxtext-ray:v1", True),
        ("rayproject/ray", False),
        ("localhost:5000/maxtext-ray", False),
        ("rayproject/ray:latest", False),
        ("rayproject/ray:nightly-py312-tpu", False),
    ],
)
def test_images_must_carry_a_fixed_tag_or_a_digest(shipped, image, pinned):
    resources = copy.deepcopy(shipped["infra-standard"])
    set_at(named(resources, "ray-cluster")["props"], (*WORKER_CONTAINER, "image"), image)
    names = {v.policy_name for v in evaluate(resources)}
    assert names == (set() if pinned else {"raycluster-images-pinned"})


@pytest.mark.parametrize(
    "attributes, bounded",
    [
        ({"mountOptions": "implicit-dirs,uid=1000"}, True),  # no file cache: the shipped mount
        ({"mountOptions": "implicit-dirs,file-cache:max-size-mb:10240"}, True),
        ({"fileCacheCapacity": "10Gi"}, True),
        ({"fileCacheCapacity": "0"}, True),
        ({"mountOptions": "implicit-dirs,file-cache:max-size-mb:-1"}, False),  # the procedure's
        ({"mountOptions": "file-cache:max-size-mb=-1, implicit-dirs"}, False),
        ({"mountOptions": "implicit-dirs", "fileCacheCapacity": "-1"}, False),
    ],
)
def test_every_fuse_file_cache_is_bounded(shipped, attributes, bounded):
    resources = copy.deepcopy(shipped["infra-standard"])
    path = (*WORKER_POD, "volumes", 1, "csi", "volumeAttributes")
    set_at(named(resources, "ray-cluster")["props"], path, {"bucketName": "ckpt", **attributes})
    violations = [v for v in evaluate(resources) if v.policy_name == "raycluster-fuse-file-cache-bounded"]
    assert len(violations) == (0 if bounded else 1)
    if violations:
        assert "volume 'gcs-fuse-csi-ephemeral' of worker group 'tpu-group' has an unbounded file cache" in (
            violations[0].message
        )
        assert "Bound it (file-cache:max-size-mb:N" in violations[0].message


@pytest.mark.parametrize(
    "version, stack, fires",
    [
        ("1.34.1-gke.1829001", STD, False),  # exactly the Standard minimum
        ("1.34.1-gke.1829000", STD, True),
        ("1.33", STD, True),
        ("1.35", STD, False),
        ("1.35", AUTO, False),  # may resolve to either side of 1.35.2-gke.1842000: undecidable
        ("latest", AUTO, False),
        ("1.34", AUTO, True),
    ],
)
def test_cluster_versions_are_compared_with_the_dranet_minimum(shipped, version, stack, fires):
    resources = copy.deepcopy(shipped[stack])
    named(resources, "maxtext-tpu")["props"]["minMasterVersion"] = version
    names = {v.policy_name for v in evaluate(resources)}
    assert names == ({"gke-cluster-dranet-version"} if fires else set())


@pytest.mark.parametrize("stack", [STD, AUTO])
@pytest.mark.parametrize("absent", [AUTH_OPTIONS, (*AUTH_OPTIONS, "mode")], ids=["authOptions", "mode"])
def test_an_absent_auth_setting_is_read_as_disabled(shipped, stack, absent):
    """KubeRay runs a RayCluster without authOptions (or without its mode) unauthenticated, so
    the rule fires on the absence, names the resource and says what to set."""
    resources = copy.deepcopy(shipped[stack])
    cluster = named(resources, "ray-cluster")
    delete_at(cluster["props"], absent)
    [violation] = evaluate(resources)
    assert violation.policy_name == "raycluster-token-auth"
    assert violation.urn == cluster["urn"] and violation.enforcement_level == "mandatory"
    assert "'ray-cluster'" in violation.message and "KubeRay reads" in violation.message
    assert 'Set spec.authOptions.mode to "token"' in violation.message
    assert "spec.rayVersion" in violation.message


@pytest.mark.parametrize("unknown", [AUTH_OPTIONS, (*AUTH_OPTIONS, "mode")], ids=["authOptions", "mode"])
def test_token_auth_not_known_yet_stays_quiet(shipped, unknown):
    """During preview the setting may still be an unknown marker: nothing can be told."""
    resources = copy.deepcopy(shipped[STD])
    props = named(resources, "ray-cluster")["props"]
    set_at(props, unknown, unknown_like(get_at(props, unknown)))
    assert evaluate(resources) == []


def _storage_resource(shipped, resource_type: str, props: dict[str, Any]) -> list[dict[str, Any]]:
    resources = copy.deepcopy(shipped["infra-standard"])
    member = named(resources, "checkpoints-checkpoint-access")
    urn = member["urn"].rsplit("::", 1)[0].replace("gcp:storage/bucketIAMMember:BucketIAMMember", resource_type)
    resources.append(
        {
            "type": resource_type,
            "name": "extra-grant",
            "urn": f"{urn}::extra-grant",
            "props": {"bucket": "checkpoints-bucket", **props},
        }
    )
    return resources


@pytest.mark.parametrize(
    "resource_type, props, policies",
    [
        (
            "gcp:storage/bucketIAMBinding:BucketIAMBinding",
            {"role": "roles/storage.objectViewer", "members": ["allAuthenticatedUsers"]},
            {"storage-no-public-members"},
        ),
        (
            "gcp:storage/bucketIAMPolicy:BucketIAMPolicy",
            {"policyData": json.dumps({"bindings": [{"role": "roles/owner", "members": ["user:a@example.com"]}]})},
            {"storage-no-admin-roles", "storage-workload-identity-members"},
        ),
        (
            "gcp:storage/bucketACL:BucketACL",
            {"roleEntities": ["OWNER:project-owners-1", "READER:allUsers"]},
            {"storage-no-public-members"},
        ),
        ("gcp:storage/bucketACL:BucketACL", {"predefinedAcl": "publicRead"}, {"storage-no-public-members"}),
        (
            "gcp:storage/objectAccessControl:ObjectAccessControl",
            {"object": "ckpt", "role": "READER", "entity": "allUsers"},
            {"storage-no-public-members"},
        ),
        (
            "gcp:storage/bucketIAMBinding:BucketIAMBinding",
            {
                "role": "roles/storage.objectViewer",
                "members": [
                    "principalSet://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/"
                    "p.svc.id.goog/namespace/default"
                ],
            },
            set(),
        ),
        ("gcp:storage/bucketIAMPolicy:BucketIAMPolicy", {"policyData": UNKNOWN_STRING_VALUE}, set()),
    ],
)
def test_every_kind_of_storage_grant_is_checked(shipped, resource_type, props, policies):
    violations = evaluate(_storage_resource(shipped, resource_type, props))
    assert {v.policy_name for v in violations} == policies
    assert all("'extra-grant'" in v.message for v in violations)


def _paths(node: Any, prefix: tuple = ()):
    """Every property path inside `node`: each key of each object, each item of each list
    (not inside the engine's encoded secrets and assets, which are single values)."""
    if isinstance(node, dict) and SIGNATURE_KEY not in node:
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield (*prefix, index)
            yield from _paths(value, (*prefix, index))


@pytest.mark.parametrize("stack", ["infra-standard", "infra-autopilot", "infra-dataset", "workloads-dev"])
def test_no_single_unknown_or_missing_property_produces_a_violation(shipped, stack):
    """Any one value still unknown (preview) or absent, anywhere, never makes a rule report."""
    failures = []
    for index, resource in enumerate(shipped[stack]):
        if resource["type"] not in READ_TYPES:
            continue  # nothing reads it (the all-at-once test below still covers it)
        for path in _paths(resource["props"]):
            for how in ("unknown", "missing"):
                if how == "missing" and (isinstance(path[-1], int) or path[-2:-1] in MAP_KEYS):
                    continue  # list items and map entries are parts of a value, not properties
                if how == "missing" and (resource["type"], path) in DECIDED_WHEN_MISSING:
                    continue  # absence is decided: test_an_absent_auth_setting_is_read_as_disabled
                resources = copy.deepcopy(shipped[stack])
                changed = resources[index]
                if how == "missing":
                    delete_at(changed["props"], path)
                else:
                    set_at(changed["props"], path, unknown_like(get_at(changed["props"], path)))
                # Resource policies see one resource at a time: only the changed one can differ.
                violations = evaluate([changed], policies=RESOURCE_POLICIES)
                violations += evaluate(resources, policies=STACK_POLICIES)
                if violations:
                    failures.append((resource["name"], path, how, [v.policy_name for v in violations]))
    assert failures == []


@pytest.mark.parametrize("stack", ["infra-standard", "infra-autopilot", "infra-dataset", "workloads-dev"])
def test_a_stack_known_only_by_its_resources_produces_no_violation(shipped, stack):
    """A first preview can know little more than which resources exist."""
    resources = copy.deepcopy(shipped[stack])
    for resource in resources:
        resource["props"] = {key: unknown_like(value) for key, value in resource["props"].items()}
    assert evaluate(resources) == []
    for resource in resources:
        resource["props"] = {}
    assert evaluate(resources) == []


def test_the_evaluator_handles_unknowns_and_async_rules_as_the_analyzer_does():
    resource = {
        "type": "test:index:Thing",
        "name": "thing",
        "urn": "urn:pulumi:dev::p::test:index:Thing::thing",
        "props": {"size": UNKNOWN_NUMBER_VALUE, "kind": "big"},
    }

    def reads_unknown(args: ResourceValidationArgs, report_violation):
        report_violation(f"size {args.props['size']}")

    async def reports_later(args: ResourceValidationArgs, report_violation):
        report_violation(f"{args.name} is {args.props['kind']}.")

    def not_applicable(args: ResourceValidationArgs, report_violation):
        args.not_applicable("not a thing")

    policies = [
        ResourceValidationPolicy("reads-unknown", "Reads a value unknown in preview.", reads_unknown),
        ResourceValidationPolicy(
            "reports-later", "Reports from a coroutine.", reports_later, enforcement_level=EnforcementLevel.MANDATORY
        ),
        ResourceValidationPolicy("not-applicable", "Never applies.", not_applicable),
    ]
    assert evaluate([resource], policies=policies) == [
        Violation(
            "reads-unknown",
            "advisory",
            "can't run policy 'reads-unknown' during preview: number value at .size can't be known during preview",
            resource["urn"],
        ),
        Violation("reports-later", "mandatory", "thing is big.", resource["urn"]),
    ]


def test_the_memory_rules_defer_to_a_fit_check_of_exactly_the_job(shipped):
    """The estimate is for when the compiler has not spoken: once a fit check of exactly this
    configuration says it fits, the estimate's near-the-limit advisory is quiet."""
    from domain.perf import fit_results
    from policies.rules.rayjob import job_of
    from tests.support.workloads_program import recorded_fit_check

    [case] = [c for c in CASES if c.policy == "rayjob-hbm-headroom"]
    resources = case.broken(shipped)
    assert {v.policy_name for v in evaluate(resources, {})} == {"rayjob-hbm-headroom"}
    job = job_of(named(resources, "training")["props"])
    fit_results.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cached = fit_results.CACHE_DIR / f"{fit_results.cache_key(job, fit_results.libtpu_flags(job))}.json"
    cached.write_text(recorded_fit_check(job).to_json())
    assert evaluate(resources, {}) == []
    # A compile that says it does not fit leaves the estimate's rules to speak.
    cached.write_text(dataclasses.replace(recorded_fit_check(job), fits=False).to_json())
    assert {v.policy_name for v in evaluate(resources, {})} == {"rayjob-hbm-headroom"}
    # A job whose runtimeEnv adds a libtpu flag runs another executable: the workers' compile does
    # not speak for it, the fit check compiled with its flags does.
    cached.write_text(recorded_fit_check(job).to_json())
    training = named(resources, "training")
    training["props"]["runtime_env"] = {"env_vars": {"LIBTPU_INIT_ARGS": "${LIBTPU_INIT_ARGS} --xla_tpu_x=1"}}
    assert {v.policy_name for v in evaluate(resources, {})} == {"rayjob-hbm-headroom"}
    flags = fit_results.runtime_flags(job, training["props"]["runtime_env"]["env_vars"])
    assert flags.libtpu_init_args.endswith(" --xla_tpu_x=1")
    own = fit_results.result_path(job, flags.libtpu_init_args, flags.xla_flags)
    own.write_text(recorded_fit_check(job).to_json())
    assert evaluate(resources, {}) == []
    # While its env_vars are not known (a preview), no compile speaks for it.
    training["props"]["runtime_env"] = {"env_vars": UNKNOWN_STRING_VALUE}
    assert {v.policy_name for v in evaluate(resources, {})} == {"rayjob-hbm-headroom"}


def test_a_presets_recorded_compile_speaks_only_for_a_job_with_the_workers_own_flags():
    """docs/fit-check.md: the preset's configuration fits as its compile recorded, unless the job's
    runtimeEnv changes the compiler's flags (another executable); flags written as the workers'
    own change nothing."""
    from types import SimpleNamespace

    from domain.training.job import resolve_job
    from policies.rules.rayjob import _compiler_says_it_fits

    job = resolve_job("llama3-8b", run_name="r", checkpoint_root="/c")

    def with_env(env_vars: dict[str, str] | None) -> bool:
        props = {} if env_vars is None else {"runtime_env": {"env_vars": env_vars}}
        return _compiler_says_it_fits(job, SimpleNamespace(props=props))

    assert with_env(None)
    assert not with_env({"LIBTPU_INIT_ARGS": "${LIBTPU_INIT_ARGS} --xla_tpu_preset_probe=1"})
    assert with_env({"LIBTPU_INIT_ARGS": "${LIBTPU_INIT_ARGS}"})


def infra_with(**settings: Any) -> list[dict[str, Any]]:
    config = stack_config("dev")
    config.update({f"maxtext-tpu-infra:{key}": value for key, value in settings.items()})
    return resources_of(run_infra(config))


def test_the_idle_budget_passes_a_stack_that_scales_to_zero_and_flags_slices_kept_up(shipped):
    """By default (idleBudgetDollarsPerDay 0) a stack may keep nothing up while idle: the shipped
    stacks scale to zero; the one of before issue 20, every slice always up, pays all day."""
    for stack in ("infra-standard", "infra-autopilot"):
        assert [v for v in evaluate(shipped[stack]) if v.policy_name == "tpu-idle-budget"] == []
    always_up = infra_with(minSlices=2)
    [violation] = [v for v in evaluate(always_up) if v.policy_name == "tpu-idle-budget"]
    assert violation.message.startswith(
        "While no job runs, the stack keeps 32 TPU chips up (16 in node pool 'tpu-0', 16 in node pool 'tpu-1'): "
        "about $86.40 an hour, $2,073.60 a day ($2.70 per chip-hour, the on-demand list price in us-east5), over "
        "the idle budget of $0.00 a day. Lower minSlices"
    )
    assert evaluate(always_up, {"tpu-idle-budget": {"idleBudgetDollarsPerDay": 2073.60}}) == []


def test_a_training_hour_and_an_idle_hour_are_priced_at_the_pools_capacity():
    """Spot pools at us-east5's Spot price: all 32 chips while training, the one slice kept up idle."""
    resources = infra_with(capacity=["spot"], minSlices=1)
    config = {"tpu-hourly-budget": {"budgetDollarsPerHour": 34}, "tpu-idle-budget": {"idleBudgetDollarsPerDay": 414}}
    training, idle = sorted(evaluate(resources, config), key=lambda v: v.policy_name)
    assert training.policy_name == "tpu-hourly-budget" and idle.policy_name == "tpu-idle-budget"
    assert "the stack's 32 TPU chips" in training.message and "about $34.56 an hour ($1.08 per chip-hour, the spot" in (
        training.message
    )
    assert "keeps 16 TPU chips up (16 in node pool 'tpu-0')" in idle.message
    assert "about $17.28 an hour, $414.72 a day ($1.08 per chip-hour, the spot list price in us-east5)" in idle.message
    config = {
        "tpu-hourly-budget": {"budgetDollarsPerHour": 34.56},
        "tpu-idle-budget": {"idleBudgetDollarsPerDay": 414.72},
    }
    assert evaluate(resources, config) == []


def test_capacity_without_a_catalog_price_is_bounded_by_on_demand():
    """Flex-start has no list price in the catalog; no capacity choice costs more than on demand,
    so the budget still holds the stack to that bound, and says so."""
    resources = infra_with(capacity=["flex-start"])
    [violation] = evaluate(resources, {"tpu-hourly-budget": {"budgetDollarsPerHour": 86}})
    assert "about $86.40 an hour ($2.70 per chip-hour, at most the on-demand list price in us-east5 (the catalog " in (
        violation.message
    )
    assert "has no flex-start price there))" in violation.message


def test_the_idle_budget_defaults_to_nothing_kept_up():
    settings = reconcile_config(ALL, None)
    assert settings["tpu-idle-budget"] == (EnforcementLevel.ADVISORY, {"idleBudgetDollarsPerDay": 0})


@pytest.mark.parametrize(
    "overrides",
    [{"capacity": ["flex-start"]}, {"minSlices": 2}, {"minSlices": 1}, {"capacity": ["spot"], "minSlices": 1}],
    ids=["flex-start", "held", "one-held-one-scaling", "spot-one-held"],
)
def test_every_standard_capacity_shape_passes(overrides):
    """The pools the program builds for each capacity choice and minSlices pass every rule."""
    config = {**stack_config("dev"), **{f"maxtext-tpu-infra:{k}": v for k, v in overrides.items()}}
    assert evaluate(resources_of(run_infra(config)), KEPT_UP_IS_PAID_FOR) == []


def test_flex_start_cases_break_a_real_flex_start_pool(shipped):
    """The flex-start cases start from pools the program built with capacity = flex-start."""
    resources = copy.deepcopy(shipped["infra-standard"])
    flex_start_pools(resources)
    pools = [named(resources, name)["props"] for name in ("tpu-0", "tpu-1")]
    assert all(p["nodeConfig"]["flexStart"] is True and p["management"]["autoRepair"] is False for p in pools)
    assert evaluate(resources) == []


# ---------------------------------------------------------------- worker groups that scale (issue 20)


def infra_stack(**settings: Any) -> list[dict[str, Any]]:
    config = stack_config("dev")
    config.update({f"maxtext-tpu-infra:{key}": value for key, value in settings.items()})
    return resources_of(run_infra(config))


RAYCLUSTER_POLICIES = {
    "raycluster-hosts-per-slice",
    "raycluster-megascale-slices",
    "raycluster-autoscaler-v2",
    "raycluster-replicas-match-slices",
    "raycluster-head-not-on-spot",
}


@pytest.mark.parametrize(
    "settings",
    [
        {"minSlices": 2},
        {"minSlices": 1},
        {"capacity": ["flex-start"]},
        {"mode": "autopilot", "capacity": ["on-demand", "spot", "flex-start"]},
    ],
    ids=["fixed", "keep-one", "flex-start", "autopilot-fallback"],
)
def test_every_scaling_shape_the_stack_builds_passes_the_raycluster_rules(settings):
    violations = evaluate(infra_stack(**settings))
    assert [v for v in violations if v.policy_name in RAYCLUSTER_POLICIES] == []


def test_an_autoscaled_group_must_scale_to_the_stacks_slices_in_whole_slices(shipped):
    resources = copy.deepcopy(shipped[STD])
    group = get_at(named(resources, "ray-cluster")["props"], WORKER)
    group["maxReplicas"] = 3
    group["numOfHosts"] = 2
    messages = {v.policy_name: v.message for v in evaluate(resources) if v.policy_name in RAYCLUSTER_POLICIES}
    assert set(messages) == {
        "raycluster-replicas-match-slices",
        "raycluster-megascale-slices",
        "raycluster-hosts-per-slice",
    }
    assert "gives a job 3 slices (maxReplicas), but the stack has 2" in messages["raycluster-replicas-match-slices"]
    assert messages["raycluster-replicas-match-slices"].endswith("Set maxReplicas to 2.")
    assert (
        "scales to at most 3 slices (maxReplicas) but sets MEGASCALE_NUM_SLICES=2"
        in messages["raycluster-megascale-slices"]
    )
    assert "has numOfHosts 2, but a 4x4 slice of TPU v6e has 4 VMs" in messages["raycluster-hosts-per-slice"]


def test_a_fixed_group_gives_a_job_its_replicas_within_min_and_max():
    """Without the autoscaler KubeRay keeps replicas, held within minReplicas and maxReplicas."""
    resources = infra_stack(minSlices=2)
    group = get_at(named(resources, "ray-cluster")["props"], WORKER)
    group["maxReplicas"] = 1  # KubeRay then runs 1 slice of the 2 the pools and JAX expect
    messages = {v.policy_name: v.message for v in evaluate(resources) if v.policy_name in RAYCLUSTER_POLICIES}
    assert set(messages) == {"raycluster-replicas-match-slices", "raycluster-megascale-slices"}
    assert "gives a job 1 slices (maxReplicas)" in messages["raycluster-replicas-match-slices"]
    assert messages["raycluster-replicas-match-slices"].endswith("Set replicas (and minReplicas, maxReplicas) to 2.")


def test_an_absent_autoscaler_setting_is_read_as_none_or_v1(shipped):
    resources = copy.deepcopy(shipped[STD])
    spec = named(resources, "ray-cluster")["props"]["spec"]
    del spec["enableInTreeAutoscaling"]
    [violation] = evaluate(resources)
    assert violation.policy_name == "raycluster-autoscaler-v2"
    assert "may run 0 to 2 slices, but spec.enableInTreeAutoscaling is not true" in violation.message
    for absent in (("autoscalerOptions", "version"), ("autoscalerOptions",)):
        resources = copy.deepcopy(shipped[STD])
        delete_at(named(resources, "ray-cluster")["props"]["spec"], absent)
        [violation] = evaluate(resources)
        assert "is scaled by Ray autoscaler v1" in violation.message
    # The head's own switch, as KubeRay before 1.4 took it, still means v2.
    head = get_at(named(resources, "ray-cluster")["props"], HEAD_CONTAINER)
    head["env"].append({"name": "RAY_enable_autoscaler_v2", "value": "true"})
    assert evaluate(resources) == []


def test_a_fixed_size_group_needs_no_autoscaler():
    resources = infra_stack(minSlices=2)
    spec = named(resources, "ray-cluster")["props"]["spec"]
    assert "enableInTreeAutoscaling" not in spec
    assert [v for v in evaluate(resources) if v.policy_name == "raycluster-autoscaler-v2"] == []


@pytest.mark.parametrize("path", [DATASET_CSI, DATASET_MOUNT], ids=["csi", "mount"])
def test_a_dataset_mount_without_read_only_is_read_write(shipped, path):
    """Kubernetes mounts a volume read-write unless readOnly says otherwise, so the rule reads an
    absent readOnly on the dataset mount as writable, and says what to set."""
    resources = copy.deepcopy(shipped[DATA])
    cluster = named(resources, "ray-cluster")
    delete_at(cluster["props"], (*path, "readOnly"))
    [violation] = evaluate(resources)
    assert violation.policy_name == "raycluster-dataset-mount-read-only"
    assert "mounted at the dataset root /dataset, is writable" in violation.message
    assert "Set readOnly: true on the volume's csi and on every volumeMount of it." in violation.message


@pytest.mark.parametrize(
    "role, allowed",
    [
        ("roles/storage.objectViewer", True),
        ("roles/storage.legacyObjectReader", True),
        ("roles/storage.objectUser", False),
        ("roles/storage.objectCreator", False),
        ("roles/storage.legacyBucketWriter", False),
        ("projects/p/roles/customWriter", False),
    ],
)
def test_the_dataset_bucket_is_only_read(shipped, role, allowed):
    resources = copy.deepcopy(shipped[DATA])
    named(resources, "checkpoints-dataset-access")["props"]["role"] = role
    violations = [v for v in evaluate(resources) if v.policy_name == "storage-dataset-bucket-read-only"]
    assert len(violations) == (0 if allowed else 1)
    if violations:
        assert f"grants {role} on bucket" in violations[0].message, violations[0].message


@pytest.mark.parametrize("bucket_name", [None, "acme-ckpt"], ids=["auto-named", "named"])
def test_the_checkpoint_buckets_write_role_is_not_the_dataset_rule_s_business(bucket_name):
    """The checkpoint bucket is the stack's own (its grant takes the bucket's name from it, or names
    it as bucketName does): its objectUser grant passes beside a dataset grant that is refused."""
    config = {**stack_config("dev"), **{f"maxtext-tpu-infra:{key}": value for key, value in DATASET_SETTINGS.items()}}
    if bucket_name:
        config["maxtext-tpu-infra:bucketName"] = bucket_name
    resources = resources_of(run_infra(config))
    assert evaluate(resources) == []
    named(resources, "checkpoints-dataset-access")["props"]["role"] = "roles/storage.objectUser"
    [violation] = evaluate(resources)
    assert violation.urn == named(resources, "checkpoints-dataset-access")["urn"]
    assert "grants roles/storage.objectUser on bucket 'acme-corpus', the dataset bucket" in violation.message
    assert violation.message.endswith("Grant roles/storage.objectViewer on it instead.")


def test_docs_list_every_rule_with_its_level_and_what_it_requires():
    """docs/policies.md's table is the pack's rules; run ./scripts/sync-settings after changing one."""
    text = POLICIES.read_text()
    assert text.split(RULES_START, 1)[1].split(RULES_END, 1)[0] == markdown_table()
    assert synced_policies(text) == text
    assert all(f"| `{policy.name}` | " in markdown_table() for policy in ALL)
    stale = markdown_table(ALL[:1])
    assert f"| `{ALL[1].name}` |" not in stale and stale.count("\n") == 3


@pytest.mark.parametrize(
    "role, member_sa, fires",
    [
        ("roles/storage.objectUser", "maxtext-ray", False),  # the job's own principal, a second grant
        ("roles/storage.objectViewer", "notebooks", False),  # another job may read the cache
        ("roles/storage.legacyBucketReader", "notebooks", False),
        ("roles/storage.objectCreator", "notebooks", True),  # creating objects is writing compiled code
        ("roles/storage.legacyBucketWriter", "notebooks", True),
    ],
)
def test_only_the_jobs_own_principal_writes_the_compile_cache(shipped, role, member_sa, fires):
    resources = copy.deepcopy(shipped["infra-standard"])
    add_cache_writer(resources)
    grant = named(resources, "cache-writer")["props"]
    grant["role"], grant["member"] = role, grant["member"].replace("/sa/notebooks", f"/sa/{member_sa}")
    violations = evaluate(resources)
    assert [v.policy_name for v in violations] == (["storage-compile-cache-writers"] if fires else [])
    if fires:
        assert f"grants {role} on bucket 'checkpoints-bucket'" in violations[0].message
        assert "anyone who can write it can run code in the job" in violations[0].message


@pytest.mark.parametrize("cache_bucket, fires", [("acme-ckpt", False), ("acme-ckpt-old", True)])
def test_a_named_checkpoint_bucket_holds_the_cache_by_its_name(shipped, cache_bucket, fires):
    """With the bucket's name known (bucketName set), the cache's bucket is matched by name, not by
    the RayCluster's dependency on the stack's one bucket."""
    resources = copy.deepcopy(shipped["infra-standard"])
    name_the_checkpoint_bucket(resources)
    container = get_at(named(resources, "ray-cluster")["props"], WORKER_CONTAINER)
    container["env"] = cache_in(cache_bucket)(container["env"])
    assert [v.policy_name for v in evaluate(resources)] == (["storage-compile-cache-own-bucket"] if fires else [])
