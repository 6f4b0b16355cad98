"""Valid stacks, accepted as the Pulumi CLI runs them: the other half of the refusal tables.

Each row is a stack a user would plausibly write, with its values as `pulumi config set` stores
them (text; a list where `--path` makes one), run through the whole program under mocks with the
config the CLI hands it: the project file's defaults merged in (tests/support/pulumi_harness.py).
A refusal of any row is a check that misfires. The idle-timeout check did, on every stack that
keeps all its slices up, because the CLI sets idleTimeoutSeconds to its default on every stack.
The workloads rows train on the outputs of the infra program's own run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from domain.gcp.gke import MODES
from domain.ray.resource_types import RAY_JOB
from domain.tpu.capacity_choices import CAPACITY_CHOICES, FLEX_START, RESERVATION
from domain.training.presets import PRESETS
from infra.config import read_settings as read_infra_settings
from infra.program import build as build_infra
from tests.support.pulumi_harness import INFRA_PROJECT, PROJECT_ROOT, RecordingMonitor, run_program, stack_config
from workloads.config import read_settings as read_workload_settings
from workloads.program import build as build_workloads

WORKLOADS_PROJECT = "maxtext-tpu-workloads"
INFRA_STACK = "organization/maxtext-tpu-infra/dev"
TPU_PRESETS = [preset for preset in PRESETS.values() if preset.runs_on_tpu]
DIGEST = "sha256:" + "0123456789abcdef" * 4


@dataclass(frozen=True)
class Stack:
    id: str
    settings: dict[str, Any]  # project keys bare, the Google provider's as gcp:KEY
    workloads: dict[str, Any] = field(default_factory=dict)  # the workloads stack's, on this infra stack
    secrets: tuple[str, ...] = ()  # workloads keys set with `pulumi config set --secret`


def _capacity_rows() -> list[Stack]:
    rows = []
    for mode in MODES:
        for preset in TPU_PRESETS:
            for capacity in CAPACITY_CHOICES:
                for min_slices in sorted({0, 1, preset.slices}):
                    if mode == "standard" and capacity == FLEX_START and min_slices:
                        continue  # refused: a flex-start pool starts at 0 nodes (tests/test_settings_refusals.py)
                    settings = {"mode": mode, "preset": preset.name, "capacity": capacity, "minSlices": str(min_slices)}
                    if capacity == RESERVATION:
                        settings["reservation"] = "team-v6e"
                    rows.append(Stack(f"{mode}-{preset.name}-{capacity}-min{min_slices}", settings))
    return rows


ROWS = [
    *_capacity_rows(),
    # Autopilot fallback orders, as `pulumi config set --path 'capacity[N]'` writes them.
    Stack("autopilot-reservation-then-spot", {"mode": "autopilot", "capacity": ["reservation", "spot"], "reservation": "team-v6e"}),
    Stack("autopilot-spot-then-on-demand", {"mode": "autopilot", "capacity": ["spot", "on-demand"], "minSlices": "1"}),
    Stack("autopilot-flex-start-then-on-demand", {"mode": "autopilot", "capacity": ["flex-start", "on-demand"]}),
    Stack("autopilot-every-choice", {"mode": "autopilot", "capacity": list(CAPACITY_CHOICES), "reservation": "team-v6e"}),
    # A default set explicitly is still the default.
    Stack("idle-timeout-set-to-its-default", {"minSlices": "2", "idleTimeoutSeconds": "300"}),
    Stack("head-machine-default-on-autopilot", {"mode": "autopilot", "headMachineType": "n1-standard-16"}),
    Stack("dcn-subnets-default-on-autopilot", {"mode": "autopilot", "dcnSubnets": ["10.50.0.0/16", "10.60.0.0/16"]}),
    # Overrides a team would set.
    Stack("scale-to-zero-slower", {"idleTimeoutSeconds": "1800"}),
    Stack("four-slices", {"slices": "4", "minSlices": "4"}),
    Stack("one-slice", {"slices": "1"}),
    Stack("own-names", {"clusterName": "llama-train", "namespace": "ml-training", "serviceAccount": "ray-trainer", "bucketName": "acme-llama-ckpt"}),
    Stack("production", {"production": "true", "deletionProtection": "true", "bucketForceDestroy": "false"}),
    Stack("new-stack-hierarchical-bucket", {"bucketHierarchicalNamespace": "true", "bucketName": "acme-llama-ckpt"}),
    Stack("bigger-head", {"headMachineType": "n2-standard-32"}),
    Stack("negotiated-price", {"pricePerChipHour": "2.1"}),
    Stack("team-labels", {"gcp:defaultLabels": {"team": "ml-research", "cost-center": "cc-1234"}}),
    Stack("newer-gke", {"gkeVersion": "1.35.4-gke.1000000"}),
    Stack("own-dcn-ranges", {"dcnSubnets": ["10.70.0.0/16", "10.80.0.0/16"]}),
    Stack("dcn-ranges-as-text", {"dcnSubnets": "10.70.0.0/16, 10.80.0.0/16"}),
    Stack("another-zone", {"gcp:region": "us-central1", "gcp:zone": "us-central1-b"}),
    Stack("single-tenant-zone-with-its-reservation", {"gcp:zone": "us-east5-c", "capacity": "reservation", "reservation": "team-v6e"}),
    Stack("autopilot-region-with-a-shared-zone", {"mode": "autopilot", "gcp:zone": "us-east5-c"}),
    # Training data in an existing bucket (issue 27): the whole bucket, a folder of it with a RAM file cache.
    Stack("dataset-bucket", {"datasetBucket": "acme-corpus"}),
    Stack("dataset-folder-cached", {"datasetBucket": "acme-corpus", "datasetPrefix": "corpora/web-v1", "datasetFileCacheMib": "16384"}),
    Stack("dataset-on-autopilot-beside-a-named-checkpoint-bucket", {"mode": "autopilot", "datasetBucket": "acme.corpus.example.com", "bucketName": "acme-ckpt"}),
    Stack("pinned-ray-image", {"rayImage": f"us-east5-docker.pkg.dev/my-gcp-project/maxtext-tpu-images/maxtext-ray@{DIGEST}"}),
    # Cold start (issue 33): the worker image preloaded from a disk image, streaming off, the cache's lifecycle.
    Stack("image-cache-disk", {"imageCacheDisk": "global/images/maxtext-ray-2-60-0"}),
    Stack("image-cache-disk-of-another-project", {"imageCacheDisk": "projects/acme-images/global/images/maxtext-ray-2-60-0", "capacity": "spot"}),
    Stack("no-image-streaming", {"imageStreaming": "false"}),
    Stack("image-outside-artifact-registry", {"rayImage": f"ghcr.io/acme/maxtext-ray@{DIGEST}"}),  # pulled whole, with a warning
    Stack("compile-cache-kept-a-day", {"compileCacheMaxAgeDays": "1"}),
    Stack("compile-cache-kept-a-year-on-autopilot", {"mode": "autopilot", "compileCacheMaxAgeDays": "365"}),
    # The workloads stack, on the dev stack's outputs.
    Stack("workloads-elastic", {}, {"elastic": "true"}),
    Stack("workloads-elastic-on-one-of-two", {"minSlices": "2"}, {"elastic": "true", "minSlices": "1"}),
    Stack("workloads-elastic-on-spot", {"capacity": "spot"}, {"elastic": "true", "minSlices": "2", "maxPreemptions": "10"}),
    Stack("workloads-elastic-on-autopilot", {"mode": "autopilot", "capacity": ["spot", "on-demand"]}, {"elastic": "true"}),
    Stack("workloads-failures", {}, {"maxFailures": "2", "maxPreemptions": "5"}),
    Stack("workloads-steps-as-a-map", {}, {"maxtextOverrides": {"steps": 200}}),
    Stack("workloads-steps-as-text", {}, {"maxtextOverrides": '{"steps": 200, "checkpoint_period": 50}'}),
    Stack("workloads-environment", {}, {"runtimeEnv": {"env_vars": {"TF_CPP_MIN_LOG_LEVEL": "2", "JAX_PLATFORMS": "tpu,cpu"}}}),
    Stack("workloads-hardware-said-again", {}, {"maxtextOverrides": {"hardware": "tpu", "steps": 50}}),
    Stack("workloads-deadlines", {}, {"timeoutSeconds": "86400", "queueTimeoutSeconds": "7200"}),
    Stack("workloads-named-run", {}, {"runName": "llama3-8b-exp1", "preset": "llama3-8b"}),
    Stack("workloads-mfu", {}, {"assumedMfu": "0.45"}),
    Stack("workloads-secret-environment", {}, {"runtimeEnv": {"env_vars": {"WANDB_API_KEY": "k-123"}}}, ("runtimeEnv",)),
    Stack("workloads-70b", {"preset": "llama3-70b"}, {"elastic": "true"}),
    # Without the compilation cache, MaxText may dump the HLO it compiles.
    Stack("workloads-without-compile-cache", {}, {"compileCache": "false"}),
    Stack("workloads-dumping-hlo-without-the-cache", {}, {"compileCache": "false", "maxtextOverrides": {"dump_hlo": "true"}}),
]  # fmt: skip


def run_infra(settings: dict[str, Any]):
    config = stack_config("dev")
    config.update({key if ":" in key else f"{INFRA_PROJECT}:{key}": value for key, value in settings.items()})
    return run_program(lambda: build_infra(read_infra_settings()), config, stack="dev")


def test_the_table_covers_every_capacity_choice_mode_and_preset_at_each_min_slices():
    covered = {(s.settings["mode"], s.settings["preset"], s.settings["capacity"], s.settings["minSlices"]) for s in ROWS if "preset" in s.settings and "minSlices" in s.settings and isinstance(s.settings.get("capacity"), str)}  # fmt: skip
    for mode in MODES:
        for preset in TPU_PRESETS:
            for capacity in CAPACITY_CHOICES:
                expected = {0} if (mode, capacity) == ("standard", FLEX_START) else {0, 1, preset.slices}
                assert {int(m) for md, p, c, m in covered if (md, p, c) == (mode, preset.name, capacity)} == expected


@pytest.mark.parametrize("stack", ROWS, ids=[stack.id for stack in ROWS])
def test_a_valid_stack_is_accepted_as_the_cli_runs_it(stack: Stack):
    infra = run_infra(stack.settings)
    assert infra.outputs["preset"] == stack.settings.get("preset", "llama3-8b")
    if "minSlices" in stack.settings:
        assert infra.outputs["minSlices"] == int(stack.settings["minSlices"])
    pools = [r.inputs for r in infra.registrations if r.type == "gcp:container/nodePool:NodePool"]
    streams = stack.settings.get("mode") != "autopilot" and stack.id not in (
        "no-image-streaming",
        "image-outside-artifact-registry",
    )
    assert pools == [] or {bool(pool["nodeConfig"].get("gcfsConfig", {}).get("enabled")) for pool in pools} == {streams}
    disks = [pool["nodeConfig"].get("secondaryBootDisks") for pool in pools if pool["name"] != "ray-head-pool"]
    if "imageCacheDisk" in stack.settings:
        assert disks and all(
            d == [{"diskImage": stack.settings["imageCacheDisk"], "mode": "CONTAINER_IMAGE_CACHE"}] for d in disks
        )
    if "datasetBucket" in stack.settings:
        assert infra.outputs["datasetRoot"] == "/dataset"
        assert infra.outputs["datasetUri"].startswith(f"gs://{stack.settings['datasetBucket']}")
    if not stack.workloads:
        return
    config = stack_config("dev", PROJECT_ROOT / "workloads")
    config.update({f"{WORKLOADS_PROJECT}:{key}": value for key, value in stack.workloads.items()})
    run = run_program(
        lambda: build_workloads(read_workload_settings()),
        config,
        project=WORKLOADS_PROJECT,
        stack="dev",
        monitor=RecordingMonitor(stack_outputs={INFRA_STACK: infra.outputs}),
        secret_keys=frozenset(f"{WORKLOADS_PROJECT}:{key}" for key in stack.secrets),
    )
    inputs = run.one(RAY_JOB).inputs
    entrypoint = inputs["entrypoint"]
    elastic = stack.workloads.get("elastic") == "true"
    assert ("maxtext_elastic_trainer" in entrypoint) == elastic, entrypoint
    if "runtimeEnv" in stack.secrets:
        assert "runtime_env" in run.one(RAY_JOB).secret_inputs
