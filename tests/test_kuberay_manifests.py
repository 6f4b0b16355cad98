"""The Kubernetes objects the infra program creates, as the API server would judge them, and the
RayCluster compared field by field with the manual procedure's own manifest."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from domain.compile_cache import COMPILE_CACHE_ENV, COMPILE_CACHE_PREFIX
from domain.config import settings as settings_module
from domain.paths import PROJECT_ROOT
from domain.ray import ray_head
from domain.resources import kuberay
from domain.stack_settings import StackSettings
from domain.tpu import tpu_catalog
from domain.tpu.tpu_catalog import ACCELERATORS
from tests.support.cli_settings import infra_settings
from tests.support.infra_program import run_infra
from tests.support.k8s_conformance import (
    normalize_numbers,
    require_schema,
    validate_against_schema,
    validate_builtin,
    validate_custom_resource,
    validate_pod_template,
)
from tests.support.pulumi_harness import stack_config
from tests.support.shared import require_shared

VARIANTS = {
    "standard": {},
    "standard-1-slice": {"slices": 1},
    "standard-16-slices-spot": {"slices": 16, "capacity": ["spot"]},
    "standard-namespace": {"namespace": "training", "serviceAccount": "trainer"},
    # Every slice always up (no autoscaler), one kept while idle, and flex-start's own pools.
    "standard-fixed": {"minSlices": 2},
    "standard-keep-one-reserved": {"minSlices": 1, "capacity": ["reservation"], "reservation": "v6e-res"},
    "standard-flex-start": {"capacity": ["flex-start"]},
    "autopilot": {"mode": "autopilot"},
    "autopilot-fixed": {"mode": "autopilot", "minSlices": 2},
    "autopilot-fallback": {
        "mode": "autopilot",
        "capacity": ["reservation", "on-demand", "spot", "flex-start"],
        "reservation": "v6e-res",
    },
    "autopilot-flex-start": {"mode": "autopilot", "capacity": ["flex-start"]},
    # Spot and a reservation are refused together (Spot VMs cannot consume reservations).
    "autopilot-spot": {"mode": "autopilot", "capacity": ["spot"]},
    "autopilot-reserved": {"mode": "autopilot", "capacity": ["reservation"], "reservation": "v6e-res"},
    # The dataset mount, schema-checked like the rest: a folder of the bucket, and a file cache on a RAM disk.
    "standard-dataset": {"datasetBucket": "acme-corpus", "datasetPrefix": "corpora/web-v1"},
    "autopilot-dataset-cached": {"mode": "autopilot", "datasetBucket": "acme-corpus", "datasetFileCacheMib": "8192"},
}


def manifests(run, kind: str) -> list[dict[str, Any]]:
    """Objects as the Kubernetes provider would send them (mock numbers back to ints)."""
    return [normalize_numbers(r.inputs) for r in run.custom_resources(kind)]


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant_run(request):
    config = stack_config("dev")
    config.update({f"maxtext-tpu-infra:{key}": value for key, value in VARIANTS[request.param].items()})
    return run_infra(config)


def test_ray_cluster_is_accepted_by_the_kuberay_crd(variant_run):
    crd = require_schema("ray.io_rayclusters.yaml")
    [ray_cluster] = manifests(variant_run, "RayCluster")
    assert validate_custom_resource(ray_cluster, crd) == []


def test_pod_templates_are_valid_kubernetes_1_34(variant_run):
    [ray_cluster] = manifests(variant_run, "RayCluster")
    spec = ray_cluster["spec"]
    assert validate_pod_template(spec["headGroupSpec"]["template"]) == []
    for group in spec["workerGroupSpecs"]:
        assert validate_pod_template(group["template"]) == []


def test_builtin_objects_are_valid_kubernetes_1_34(variant_run):
    objects = manifests(variant_run, "ResourceClaimTemplate") + manifests(variant_run, "ServiceAccount")
    objects += manifests(variant_run, "Namespace")
    assert objects
    for obj in objects:
        obj = {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind"), **obj}
        assert validate_builtin(obj) == [], obj


@pytest.mark.parametrize(
    "capacity",
    [{"capacity": ["spot"]}, {"capacity": ["reservation"], "reservation": "v6e-res"}],
    ids=["spot", "reserved"],
)
def test_compute_class_matches_its_schema(capacity):
    schema = yaml.safe_load(require_schema("computeclass_v1.json").read_text())
    config = stack_config("dev")
    config["maxtext-tpu-infra:mode"] = "autopilot"
    config.update({f"maxtext-tpu-infra:{key}": value for key, value in capacity.items()})
    [compute_class] = manifests(run_infra(config), "ComputeClass")
    assert validate_against_schema(compute_class, schema) == []


# (stack settings, worker terminationGracePeriodSeconds, worker RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S)
PREEMPTION_TIMING = {
    # Kubernetes' default grace, stated; Ray's drain 3 s before it instead of at the same moment.
    "standard": ({}, 30, "27"),
    "autopilot": ({"mode": "autopilot"}, 30, "27"),
    # The node pools' kubelet shuts down over 120 s, 15 of them kept for system-critical pods.
    "standard-spot": ({"capacity": ["spot"]}, 105, "102"),
    # GKE's default on Autopilot's own nodes: 30 s, 15 of them for system-critical pods.
    "autopilot-spot": ({"mode": "autopilot", "capacity": ["spot"]}, 15, "12"),
}


@pytest.mark.parametrize("variant", list(PREEMPTION_TIMING))
def test_workers_drain_before_the_kubelet_kills_them(variant):
    """docs/spot.md: the workers' grace period is the node's shutdown share, `ray start`'s drain
    deadline falls before its end, and Ray Train polls for drains every second."""
    overrides, grace, drain = PREEMPTION_TIMING[variant]
    config = stack_config("dev")
    config.update({f"maxtext-tpu-infra:{key}": value for key, value in overrides.items()})
    [ray_cluster] = manifests(run_infra(config), "RayCluster")
    worker = ray_cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    env = {item["name"]: item["value"] for item in worker["containers"][0]["env"]}
    assert worker["terminationGracePeriodSeconds"] == grace
    assert env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == drain
    assert 0 < float(drain) < grace
    assert env["RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S"] == "1"
    # The head (never on Spot) gets only the poll interval: Ray Train's controller, which reads it,
    # runs on the job driver's node.
    head = ray_cluster["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["env"] == [{"name": "RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S", "value": "1"}]
    assert "terminationGracePeriodSeconds" not in head


def test_broken_generated_objects_are_rejected():
    """The checks bite on our own output, not only on hand-made examples."""
    crd = require_schema("ray.io_rayclusters.yaml")
    run = run_infra(stack_config("dev"))
    [ray_cluster] = manifests(run, "RayCluster")
    worker = ray_cluster["spec"]["workerGroupSpecs"][0]
    worker["numHosts"] = 4  # misspelt numOfHosts
    worker["replicas"] = 2**31
    errors = validate_custom_resource(ray_cluster, crd)
    assert any("workerGroupSpecs[0].numHosts" in error for error in errors), errors
    assert any("workerGroupSpecs[0].replicas" in error for error in errors), errors

    [claim] = manifests(run, "ResourceClaimTemplate")
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    assert validate_builtin(claim) != []

    [ray_cluster] = manifests(run, "RayCluster")
    ray_cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["claim"] = []
    assert validate_pod_template(ray_cluster["spec"]["workerGroupSpecs"][0]["template"]) != []


# ---------------------------------------------------------------- comparison with the procedure

# Every way the generated RayCluster and claim template differ from the procedure's manifest
# (`reference/ray-cluster.tpu-multi-slice.yaml`), by path prefix, with the reason.
DELIBERATE_DIFFERENCES = {
    "ResourceClaimTemplate.metadata.name": "named for its purpose (DCN NICs), not its count: "
    "the count follows the accelerator's DCN network count",
    "ResourceClaimTemplate.metadata.namespace": "explicit namespace from stack config",
    "RayCluster.metadata.namespace": "explicit namespace from stack config",
    "RayCluster.spec.authOptions": "Ray token authentication on (mode token): the Jobs API runs "
    "arbitrary commands, and without a token any pod in the cluster could send them; KubeRay "
    "generates the token into a Secret in the cluster, so it never enters Pulumi's state",
    "RayCluster.spec.rayVersion": "KubeRay refuses token authentication unless rayVersion names a "
    "Ray of 2.52.0 or later; it states the Ray of the worker image, which the procedure's moving "
    "nightly tag could not",
    "RayCluster.spec.headGroupSpec.serviceType": "ClusterIP stated explicitly: the Jobs API on "
    "8265 runs arbitrary commands and must never get a public LoadBalancer",
    "RayCluster.spec.headGroupSpec.template.spec.containers[0].image": "the stack's worker image "
    "(pinned Ray and MaxText baked in, tagged by content) instead of the moving nightly tag, so "
    "jobs start without installing packages",
    "RayCluster.spec.headGroupSpec.template.spec.containers[0].imagePullPolicy": "IfNotPresent: "
    "the tag is pinned (and immutable in the stack's repository), so re-pulling on every pod "
    "start only adds latency",
    "RayCluster.spec.headGroupSpec.template.spec.affinity": "the head must not land on Spot "
    "capacity, whose preemption would end the job, nor on flex-start capacity, whose nodes end "
    "after their maximum run duration",
    "RayCluster.spec.enableInTreeAutoscaling": "the default stack scales to zero (minSlices 0): "
    "KubeRay's in-tree autoscaler brings slices up for a job and removes idle ones",
    "RayCluster.spec.autoscalerOptions": "Ray autoscaler v2 (the only one that reads the label "
    "selectors of Ray's TPU slice placement groups), the stack's idleTimeoutSeconds, no upscaling "
    "rate limit, and the sidecar's resources stated",
    "RayCluster.spec.workerGroupSpecs[0].replicas": "left to the autoscaler on a scaling stack: "
    "KubeRay starts the group at minReplicas, and a stated value would be re-applied by every "
    "`pulumi up`, taking a running job's slices away",
    "RayCluster.spec.workerGroupSpecs[0].minReplicas": "minSlices (0 by default): the slices kept while no job runs",
    "RayCluster.spec.workerGroupSpecs[0].maxReplicas": "the stack's slices, the most the autoscaler "
    "may bring up (one replica is one whole multi-host slice)",
    "RayCluster.spec.workerGroupSpecs[0].template.spec.containers[0].image": "the stack's worker "
    "image instead of the moving nightly tag (see the head's image): the TPU hosts start with "
    "MaxText installed",
    "RayCluster.spec.workerGroupSpecs[0].template.spec.containers[0].imagePullPolicy": "IfNotPresent "
    "for the pinned tag",
    "RayCluster.spec.workerGroupSpecs[0].template.spec.resourceClaims[0].resourceClaimTemplateName": "follows the claim template's name",
    "RayCluster.spec.headGroupSpec.template.spec.containers[0].env": "Ray Train's preemption poll "
    "every second instead of every 5 s, read by the controller on the driver's node (the head), so a "
    "Spot notice reaches the trainer early in the node's short shutdown window (docs/spot.md)",
    "RayCluster.spec.workerGroupSpecs[0].template.spec.containers[0].env[5]": "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S: "
    "`ray start` drains its node on SIGTERM with a deadline before the kubelet's SIGKILL, not at the "
    "same moment (Ray's 30 s default equals Kubernetes' default grace period)",
    "RayCluster.spec.workerGroupSpecs[0].template.spec.containers[0].env[6]": "the preemption poll, "
    "as on the head, should a driver run on a worker",
    "RayCluster.spec.workerGroupSpecs[0].template.spec.containers[0].env[7]": "the persistent compilation "
    "cache in the checkpoint bucket (MAXTEXT_TPU_COMPILE_CACHE, domain/compile_cache.py), which the trainer "
    "gives MaxText as jax_cache_dir: MaxText's default is a folder in the pod, so every restart compiled again",
    "RayCluster.spec.workerGroupSpecs[0].template.spec.terminationGracePeriodSeconds": "stated, so "
    "the drain timeout can be derived from it (Kubernetes' 30 s on on-demand capacity; the node's "
    "shutdown share on Spot)",
    "RayCluster.spec.headGroupSpec.template.spec.volumes[1].csi.volumeAttributes.mountOptions": "no "
    "file cache on the checkpoint mount: file-cache:max-size-mb:-1 fills the node's boot disk with every "
    "checkpoint a restore reads (policy raycluster-fuse-file-cache-bounded); and GKE's checkpoint advice: "
    "a rename-dir-limit, without which Orbax's rename of a finished checkpoint fails on a flat bucket, "
    'streaming writes instead of staging each file on the boot disk, no caching of "not found" (what '
    "another host writes shows at once), found metadata kept, and a 1 MiB kernel read-ahead for restores",
    "RayCluster.spec.workerGroupSpecs[0].template.spec.volumes[1].csi.volumeAttributes.mountOptions": "the "
    "checkpoint mount's options, as on the head",
    "RayCluster.spec.workerGroupSpecs[0].template.spec.containers[0].env[4].value": "LIBTPU_INIT_ARGS "
    "without --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true, which the pinned libtpu "
    "(0.0.52) refuses for v6e: the job would fail at its first step (tests/test_fit_check.py "
    "compiles the presets with exactly these flags)",
}

KSA, BUCKET = "maxtext-ray", "checkpoints-bucket"  # the dev stack's service account; the mock bucket


def flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}.{key}"))
        return flat
    if isinstance(value, list):
        flat = {}
        for index, item in enumerate(value):
            flat.update(flatten(item, f"{prefix}[{index}]"))
        return flat
    return {prefix: value}


def reference_objects() -> dict[str, dict[str, Any]]:
    text = require_shared("reference/ray-cluster.tpu-multi-slice.yaml").read_text()
    text = text.replace("${KSA_NAME}", KSA).replace("${GS_BUCKET}", BUCKET)
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text) if doc}


def test_ray_cluster_matches_the_procedure_but_for_listed_reasons():
    run = run_infra(stack_config("dev"))
    ours = {
        "ResourceClaimTemplate": manifests(run, "ResourceClaimTemplate")[0],
        "RayCluster": manifests(run, "RayCluster")[0],
    }
    reference = reference_objects()
    ours_flat: dict[str, Any] = {}
    reference_flat: dict[str, Any] = {}
    for kind in ours:
        ours_flat.update(flatten(ours[kind], kind))
        reference_flat.update(flatten(reference[kind], kind))
    differing = {
        path
        for path in set(ours_flat) | set(reference_flat)
        if ours_flat.get(path, "<absent>") != reference_flat.get(path, "<absent>")
    }

    def explained_by(path: str) -> str | None:
        return next(
            (
                prefix
                for prefix in DELIBERATE_DIFFERENCES
                if path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[")
            ),
            None,
        )

    unexplained = sorted(path for path in differing if explained_by(path) is None)
    assert unexplained == [], {path: (ours_flat.get(path), reference_flat.get(path)) for path in unexplained}
    stale = sorted(set(DELIBERATE_DIFFERENCES) - {explained_by(path) for path in differing})
    assert stale == [], f"listed differences that no longer differ: {stale}"


def test_worker_flags_are_the_procedures_less_the_one_libtpu_refuses_plus_the_recipes():
    """The procedure's LIBTPU_INIT_ARGS, in order, without the all-gather continuation fusion
    that libtpu 0.0.52 refuses for v6e (measured: tests/test_fit_check.py), with MaxText's v6e
    recipes' scoped VMEM limit instead of the procedure's and their overlap and host-offload
    flags added (docs/capacity.md)."""
    worker = reference_objects()["RayCluster"]["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    procedure = {item["name"]: item["value"] for item in worker["env"]}["LIBTPU_INIT_ARGS"].split()
    refused = "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true"
    vmem = "--xla_tpu_scoped_vmem_limit_kib="
    assert refused in procedure and f"{vmem}122880" in procedure
    kept = [flag for flag in procedure if flag != refused and not flag.startswith(vmem)]
    ours = ACCELERATORS["v6e"].libtpu_init_args().split()
    assert [flag for flag in ours if flag in kept] == kept
    assert [flag for flag in ours if flag not in kept] == [
        *tpu_catalog.DENSE_VMEM_LIMIT,
        *tpu_catalog.DATA_PARALLEL_OVERLAP,
        *tpu_catalog.HOST_OFFLOAD,
    ]


# ---------------------------------------------------------------- capacity and scaling (issue 20)

BASE_SETTINGS = {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"}


def settings_of(**overrides: Any) -> StackSettings:
    return infra_settings({**BASE_SETTINGS, **overrides})


def ray_cluster_of(**overrides: Any) -> dict[str, Any]:
    return kuberay.ray_cluster(
        settings_of(**overrides), "checkpoints-bucket", "example/ray:1", "gs://checkpoints-bucket/jax-cache"
    )


AUTOSCALER = {
    "enableInTreeAutoscaling": True,
    "autoscalerOptions": {
        "version": "v2",
        "idleTimeoutSeconds": 300,
        "upscalingMode": "Default",
        "resources": {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi"},
        },
    },
}

# (stack settings, the spec's autoscaling fields, the worker group's sizes)
SCALING = {
    # The default stack scales to zero: no replicas stated, KubeRay starts at minReplicas 0.
    "scale-to-zero": ({}, AUTOSCALER, {"minReplicas": 0, "maxReplicas": 2, "numOfHosts": 4}),
    "keep-one": (
        {"minSlices": 1, "idleTimeoutSeconds": 900},
        {**AUTOSCALER, "autoscalerOptions": {**AUTOSCALER["autoscalerOptions"], "idleTimeoutSeconds": 900}},
        {"minReplicas": 1, "maxReplicas": 2, "numOfHosts": 4},
    ),
    "larger-slices": (
        {"slices": 3, "topology": "4x8"},
        AUTOSCALER,
        {"minReplicas": 0, "maxReplicas": 3, "numOfHosts": 8},
    ),
    # Every slice always up: as before issue 20, no autoscaler.
    "fixed": ({"minSlices": 2}, {}, {"replicas": 2, "minReplicas": 2, "maxReplicas": 2, "numOfHosts": 4}),
}
SIZES = ("replicas", "minReplicas", "maxReplicas", "numOfHosts")


@pytest.mark.parametrize("shape", list(SCALING))
def test_the_worker_group_scales_whole_slices_with_ray_autoscaler_v2(shape, monkeypatch):
    # The shapes apart from the presets' meshes, which span 16 chips (tests/test_settings_refusals.py).
    monkeypatch.setattr(settings_module, "_mesh_problems", lambda *args: [])
    overrides, autoscaling, sizes = SCALING[shape]
    spec = ray_cluster_of(**overrides)["spec"]
    assert {key: spec[key] for key in ("enableInTreeAutoscaling", "autoscalerOptions") if key in spec} == autoscaling
    [group] = spec["workerGroupSpecs"]
    assert {key: group[key] for key in SIZES if key in group} == sizes
    # JAX still waits for every slice: the autoscaler brings up maxReplicas of them for a job.
    env = {item["name"]: item["value"] for item in group["template"]["spec"]["containers"][0]["env"]}
    assert env["MEGASCALE_NUM_SLICES"] == str(sizes["maxReplicas"])


def test_the_autoscaler_sidecar_asks_what_the_head_check_counts():
    """The sidecar's resources are declared once (domain/ray/ray_head.py) for the head's node check."""
    options = ray_cluster_of()["spec"]["autoscalerOptions"]
    assert options["resources"]["requests"] == {"cpu": ray_head.AUTOSCALER_CPU, "memory": ray_head.AUTOSCALER_MEMORY}


def slice_priority(**capacity: Any) -> dict[str, Any]:
    """A ComputeClass priority for the default stack's slice (v6e 4x4, 4 chips a VM, DRANET)."""
    return {
        "machineType": "ct6e-standard-4t",
        "tpu": {"type": "tpu-v6e-slice", "count": 4, "topology": "4x4"},
        "acceleratorNetworkProfile": "auto",
        **capacity,
    }


RESERVED = {"reservations": {"affinity": "Specific", "specific": [{"name": "v6e-res"}]}}
# capacity setting -> the ComputeClass's priorities, in order
PRIORITIES = {
    "on-demand": (["on-demand"], [slice_priority()]),
    "spot": (["spot"], [slice_priority(spot=True)]),
    "reservation": (["reservation"], [slice_priority(**RESERVED)]),
    "flex-start": (["flex-start"], [slice_priority(flexStart={"enabled": True})]),
    "fallback": (
        ["reservation", "on-demand", "spot", "flex-start"],
        [
            slice_priority(**RESERVED),
            slice_priority(),
            slice_priority(spot=True),
            slice_priority(flexStart={"enabled": True}),
        ],
    ),
    "spot-then-on-demand": (["spot", "on-demand"], [slice_priority(spot=True), slice_priority()]),
}


def autopilot_settings(capacity: list[str]) -> StackSettings:
    reservation = {"reservation": "v6e-res"} if "reservation" in capacity else {}
    return settings_of(mode="autopilot", capacity=capacity, **reservation)


@pytest.mark.parametrize("choice", list(PRIORITIES))
def test_the_compute_class_tries_each_capacity_choice_in_order_and_nothing_else(choice):
    capacity, priorities = PRIORITIES[choice]
    assert kuberay.compute_class(autopilot_settings(capacity)) == {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": "dranet-compute-class"},
        "spec": {
            "nodePoolAutoCreation": {"enabled": True},
            "nodePoolConfig": {"dra": {"networking": {"enabled": True}}},
            "priorities": priorities,
            # Never a node the list does not describe (ScaleUpAnyway would fall back to one).
            "whenUnsatisfiable": "DoNotScaleUp",
        },
    }


@pytest.mark.parametrize("choice", list(PRIORITIES))
def test_every_compute_class_matches_its_schema(choice):
    schema = yaml.safe_load(require_schema("computeclass_v1.json").read_text())
    assert validate_against_schema(kuberay.compute_class(autopilot_settings(PRIORITIES[choice][0])), schema) == []


TPU_SELECTORS = {
    "iam.gke.io/gke-metadata-server-enabled": "true",
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "4x4",
}
# stack settings -> the worker pods' node selector beyond the TPU ones
WORKER_SELECTORS = {
    "standard-on-demand": ({}, {}),
    "standard-spot": ({"capacity": ["spot"]}, {"cloud.google.com/gke-spot": "true"}),
    "standard-flex-start": ({"capacity": ["flex-start"]}, {"cloud.google.com/gke-flex-start": "true"}),
    "standard-reservation": ({"capacity": ["reservation"], "reservation": "v6e-res"}, {}),
    # On Autopilot the class decides: a Spot or flex-start selector would refuse its other priorities.
    "autopilot-spot": (
        {"mode": "autopilot", "capacity": ["spot"]},
        {"cloud.google.com/compute-class": "dranet-compute-class"},
    ),
    "autopilot-fallback": (
        {"mode": "autopilot", "capacity": ["on-demand", "spot", "flex-start"]},
        {"cloud.google.com/compute-class": "dranet-compute-class"},
    ),
}


@pytest.mark.parametrize("variant", list(WORKER_SELECTORS))
def test_workers_select_their_capacity_and_the_head_avoids_spot_and_flex_start(variant):
    overrides, capacity_selector = WORKER_SELECTORS[variant]
    spec = ray_cluster_of(**overrides)["spec"]
    # The TPU selectors stay: Ray's autoscaler reads them to count a replica as one slice.
    assert spec["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == {**TPU_SELECTORS, **capacity_selector}
    head = spec["headGroupSpec"]["template"]["spec"]
    assert head["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"},
                    {"key": "cloud.google.com/gke-flex-start", "operator": "DoesNotExist"},
                ]
            }
        ]
    }


def test_autopilot_uses_the_compute_class_exactly_when_it_decides_something():
    assert kuberay.uses_compute_class(settings_of(mode="autopilot"))  # DRANET's NICs
    assert not kuberay.uses_compute_class(settings_of(capacity=["spot"]))  # Standard: node pools


# ---------------------------------------------------------------- the dataset and checkpoint mounts (issue 27)

# GKE's options for training reads (https://cloud.google.com/kubernetes-engine/docs/how-to/cloud-storage-fuse-csi-driver-perf,
# and its TPU training sample, gcsfuse's samples/gke-csi-yaml/tpu/training-pv.yaml): metadata caches
# unbounded in size, no kernel list cache, "not found" never cached; cached metadata expires after
# 60 s (the sample's never does), since the pods outlive the jobs whose data they read.
TRAINING_READS = (
    "metadata-cache:ttl-secs:60,metadata-cache:stat-cache-max-size-mb:-1,"
    "metadata-cache:type-cache-max-size-mb:-1,file-system:kernel-list-cache-ttl-secs:0,"
    "metadata-cache:negative-ttl-secs:0"
)
OWNER = "implicit-dirs,uid=1000,gid=1000,dir-mode=555,file-mode=444"


def worker_pod(**overrides: Any) -> dict[str, Any]:
    return ray_cluster_of(**overrides)["spec"]["workerGroupSpecs"][0]["template"]


def volume(pod_spec: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((v for v in pod_spec["volumes"] if v["name"] == name), None)


@pytest.mark.parametrize(
    "overrides, options",
    [
        ({}, f"{OWNER},{TRAINING_READS},file-cache:max-size-mb:0"),
        (
            {"datasetPrefix": "corpora/web-v1"},
            f"{OWNER},{TRAINING_READS},only-dir=corpora/web-v1,file-cache:max-size-mb:0",
        ),
        (
            {"datasetFileCacheMib": "8192"},
            f"{OWNER},{TRAINING_READS},file-cache:max-size-mb:8192,"
            "file-cache:cache-file-for-range-read:true,file-cache:enable-parallel-downloads:true,"
            "read_ahead_kb=1024",
        ),
    ],
    ids=["whole-bucket", "prefix", "file-cache"],
)
def test_every_worker_reads_the_dataset_read_only_with_gkes_training_options(overrides, options):
    """The dataset bucket at /dataset, read-only on the CSI volume and on the mount, its metadata
    prefetched on mount (with the prefetch sidecar's memory raised as GKE says), its folder as
    only-dir; no file cache unless datasetFileCacheMib bounds one, and the kernel's read-ahead
    raised only beside that cache, as GKE's TPU training sample pairs them."""
    template = worker_pod(datasetBucket="acme-corpus", **overrides)
    spec = template["spec"]
    assert volume(spec, kuberay.DATASET_VOLUME) == {
        "name": "gcs-fuse-dataset",
        "csi": {
            "driver": "gcsfuse.csi.storage.gke.io",
            "readOnly": True,
            "volumeAttributes": {
                "bucketName": "acme-corpus",
                "mountOptions": options,
                "gcsfuseMetadataPrefetchOnMount": "true",
            },
        },
    }
    [container] = spec["containers"]
    assert [m for m in container["volumeMounts"] if m["name"] == kuberay.DATASET_VOLUME] == [
        {"name": "gcs-fuse-dataset", "mountPath": "/dataset", "readOnly": True}
    ]
    assert kuberay.DATASET_MOUNT == "/dataset"
    assert template["metadata"]["annotations"]["gke-gcsfuse/metadata-prefetch-memory-limit"] == "512Mi"
    assert validate_pod_template(template) == []


def test_a_change_to_the_dataset_bucket_reaches_long_lived_pods_within_the_stated_time():
    """The head and the slices kept up (minSlices, the idle timeout) outlive jobs, so nothing the
    dataset mount caches may last forever: a listing always comes from the bucket (no kernel list
    cache, whose TTL also fails to expire on kernels 6.9 to 6.12), "not found" is never cached, and
    a file's cached size and type expire after DATASET_METADATA_TTL_SECS, the wait
    docs/deploying.md tells a user who changed the data."""
    cluster = ray_cluster_of(datasetBucket="acme-corpus", minSlices="1", datasetFileCacheMib="4096")
    pods = [cluster["spec"]["headGroupSpec"]["template"], cluster["spec"]["workerGroupSpecs"][0]["template"]]
    for template in pods:
        options = volume(template["spec"], kuberay.DATASET_VOLUME)["csi"]["volumeAttributes"]["mountOptions"]
        ttls = {
            key: int(value)
            for key, _, value in (option.rpartition(":") for option in options.split(","))
            if key.endswith("ttl-secs")
        }
        assert ttls == {
            "metadata-cache:ttl-secs": kuberay.DATASET_METADATA_TTL_SECS,
            "file-system:kernel-list-cache-ttl-secs": 0,
            "metadata-cache:negative-ttl-secs": 0,
        }
    assert 0 < kuberay.DATASET_METADATA_TTL_SECS <= 60
    docs = " ".join((PROJECT_ROOT / "docs" / "deploying.md").read_text().split())
    training_data = docs.split("### Training data", 1)[1].split(" #", 1)[0]
    said = f"reaches their pods within {kuberay.DATASET_METADATA_TTL_SECS} seconds"
    assert said in training_data
    assert "kept for the job" not in docs


def test_a_dataset_file_cache_is_a_bounded_ram_disk_never_the_boot_disk():
    """GKE's custom cache volume (gke-gcsfuse-cache) as a memory-backed emptyDir, larger than the
    cache as GKE requires; without datasetFileCacheMib there is no cache volume, so nothing could
    be cached on the node's boot disk either (file-cache:max-size-mb:0)."""
    cached = worker_pod(datasetBucket="acme-corpus", datasetFileCacheMib="8192")["spec"]
    assert volume(cached, "gke-gcsfuse-cache") == {
        "name": "gke-gcsfuse-cache",
        "emptyDir": {"medium": "Memory", "sizeLimit": "9216Mi"},
    }
    uncached = worker_pod(datasetBucket="acme-corpus")["spec"]
    assert volume(uncached, "gke-gcsfuse-cache") is None
    assert (
        "file-cache:max-size-mb:0"
        in volume(uncached, kuberay.DATASET_VOLUME)["csi"]["volumeAttributes"]["mountOptions"]
    )


def test_without_a_dataset_nothing_is_mounted_but_the_checkpoints():
    template = worker_pod()
    assert [v["name"] for v in template["spec"]["volumes"]] == ["dshm", "gcs-fuse-csi-ephemeral"]
    assert [m["mountPath"] for m in template["spec"]["containers"][0]["volumeMounts"]] == ["/data", "/dev/shm"]
    assert "gke-gcsfuse/metadata-prefetch-memory-limit" not in template["metadata"]["annotations"]


def test_the_head_mounts_the_dataset_read_only_without_a_file_cache():
    """The job's driver on the head checks the data files before any worker starts; it reads
    only their names and manifest, so it has no file cache (nor the RAM disk for one)."""
    head = ray_cluster_of(datasetBucket="acme-corpus", datasetFileCacheMib="4096")["spec"]["headGroupSpec"]["template"]
    dataset = volume(head["spec"], kuberay.DATASET_VOLUME)["csi"]
    assert dataset["readOnly"] is True
    options = dataset["volumeAttributes"]["mountOptions"].split(",")
    assert "file-cache:max-size-mb:0" in options
    assert not [option for option in options if option.startswith("read_ahead_kb")]
    assert volume(head["spec"], kuberay.GCS_FUSE_CACHE_VOLUME) is None
    [mount] = [m for m in head["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == kuberay.DATASET_MOUNT]
    assert mount["readOnly"] is True


def test_the_checkpoint_mount_follows_gkes_checkpoint_advice():
    """Read-write, no file cache at all (none of the procedure's boot-disk cache), a rename limit
    for Orbax's directory rename on a flat bucket, streaming writes, and GKE's checkpointing
    metadata cache (gcsfuse's samples/gke-csi-yaml/tpu/checkpointing-pv.yaml): "not found" never
    cached, so the files and commit another host writes are seen at once, what was found kept.
    The kernel reads ahead 1 MiB for restores. Neither the kernel's list cache (a listing of the
    steps must show a step another host has just committed) nor a metadata prefetch of the whole
    bucket (every run's checkpoints and the compilation cache, at each pod start)."""
    cluster = ray_cluster_of(datasetBucket="acme-corpus")
    pods = [cluster["spec"]["headGroupSpec"]["template"], cluster["spec"]["workerGroupSpecs"][0]["template"]]
    for template in pods:
        checkpoint = volume(template["spec"], kuberay.GCS_FUSE_VOLUME)["csi"]
        assert "readOnly" not in checkpoint
        assert set(checkpoint["volumeAttributes"]) == {"bucketName", "mountOptions"}  # no prefetch on mount
        options = checkpoint["volumeAttributes"]["mountOptions"].split(",")
        assert options == [
            "implicit-dirs",
            "uid=1000",
            "gid=1000",
            "dir-mode=775",
            "file-mode=664",
            "rename-dir-limit=200000",
            "write:enable-streaming-writes:true",
            "metadata-cache:negative-ttl-secs:0",
            "metadata-cache:ttl-secs:-1",
            "read_ahead_kb=1024",
        ]
        assert not [option for option in options if option.startswith(("file-cache", "file-system:kernel-list"))]
        assert [m for m in template["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == "/data"] == [
            {"name": "gcs-fuse-csi-ephemeral", "mountPath": "/data"}
        ]


def test_the_workers_keep_compiled_programs_in_the_checkpoint_buckets_cache_prefix():
    """The trainer reads where the compilation cache is from its pod (domain/compile_cache.py):
    the checkpoint bucket's own prefix, over gs://, on the TPU workers only (the driver on the head
    compiles nothing)."""
    run = run_infra(stack_config("dev"))
    [ray_cluster] = manifests(run, "RayCluster")
    worker = ray_cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in worker["env"]}
    assert env[COMPILE_CACHE_ENV] == f"gs://{run.outputs['bucketName']}/{COMPILE_CACHE_PREFIX}"
    head = ray_cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert COMPILE_CACHE_ENV not in {item["name"] for item in head["env"]}
