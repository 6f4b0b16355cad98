"""The workloads program under Pulumi mocks: the infra stack's outputs become the job's inputs."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from domain.config.workload_settings import WorkloadSettingsError
from domain.ray.resource_types import RAY_JOB_GUARD
from domain.setting import camel_case
from domain.training.goodput import OUTPUTS as GOODPUT_OUTPUTS
from domain.training.job import JobError
from domain.training.job_log import DATA_OUTPUTS
from domain.training.run_estimate import RunEstimate
from tests.support.cli_settings import workload_settings
from tests.support.pulumi_harness import PROJECT_ROOT, RecordingMonitor, run_program, stack_config
from tests.support.refusals import assert_one_problem
from tests.support.workloads_program import (
    INFRA_OUTPUTS,
    INFRA_STACK,
    PROJECT,
    RAY_JOB,
    WORKLOADS_DIR,
    job_of,
    recorded_fit_check,
    run_workloads,
)
from workloads.config import read_settings
from workloads.job_inputs import COST_OUTPUTS
from workloads.program import build
from workloads.ray_job.record import EXPORTED, OUTPUTS, CheckpointBucket, JobRequest, WorkerGroup


def test_dev_stack_trains_on_the_infra_stack_cluster():
    _, inputs = run_workloads("dev")
    assert inputs["gke"] == {
        "endpoint": "203.0.113.10",
        "ca_certificate": "Q0VSVA==",
        "namespace": "training",
        "service": "maxtext-tpu-cluster-head-svc",
        "port": 8265,
    }
    assert inputs.get("address") is None  # unset inputs are not sent at all
    assert inputs["stack"] == "dev"
    job = job_of(inputs["entrypoint"])
    assert shlex.split(inputs["entrypoint"])[2] == "trainer.maxtext_multi_slice_trainer"
    assert (job.preset, job.slices, job.topology, job.num_workers) == ("llama3-8b", 2, "4x4", 8)
    # The default run name: the preset, the stack and a digest of its organization, project and name.
    assert (job.checkpoint_root, job.run_name) == ("/data", "llama3-8b-dev-154078")
    assert inputs["checkpoint_dir"] == "/data/llama3-8b-dev-154078"
    assert inputs["total_steps"] == 100
    assert inputs.get("runtime_env") is None  # nothing installed at job start
    assert "token" not in json.dumps(inputs).lower()


def test_the_job_cost_is_estimated_before_it_runs():
    run, _ = run_workloads("dev")
    outputs = run.outputs
    # 100 steps of 8B at 4 x 4096 tokens per chip on 32 chips, 40% of 918 TFLOP/s per chip.
    assert outputs["assumedMfu"] == 0.40 and outputs["estimateSource"] == "assumedMfu"
    # MaxText's count (tests/test_model_flops.py): ~48.2e9 FLOPs x 524,288 tokens / 11.75 PFLOP/s.
    assert outputs["flopsSource"] == "maxtext" and outputs["estimatedStepSeconds"] == 2.153
    expected = round(outputs["estimatedStepSeconds"] * 100 / 3600 * 32 * 2.70, 2)
    assert outputs["estimatedJobDollars"] == pytest.approx(expected, abs=0.01)
    # The RayJob is given the same estimate, for the run's page and scalars.
    _, inputs = run_workloads("dev")
    estimate = RunEstimate.from_props(inputs["estimate"])
    assert (estimate.source, estimate.mfu, estimate.peak_tflops_per_chip) == ("assumedMfu", 0.40, 918)
    assert round(estimate.step_seconds or 0, 3) == 2.153 and estimate.job_dollars == outputs["estimatedJobDollars"]
    assert estimate.dollars_per_hour == pytest.approx(32 * 2.70)
    assert estimate.step_seconds_low is None and "no error band" in (estimate.band or "")
    # A CPU job has none.
    assert run_workloads("local")[1].get("estimate") is None


def test_a_capacity_without_a_price_gives_the_job_no_dollar_figure_and_says_why():
    """A flex-start infra stack without pricePerChipHour exports no price (domain/perf/capacity.py)."""
    basis = "no dollar figure: the catalog has no flex-start list price for TPU v6e in us-east5"
    run, _ = run_workloads("dev", infra_outputs={**INFRA_OUTPUTS, "pricePerChipHourUsd": None, "costBasis": basis})
    outputs = run.outputs
    assert outputs["estimatedJobDollars"] is None and outputs["costBasis"] == basis
    assert 2.0 < outputs["estimatedStepSeconds"] < 2.6 and outputs["estimatedJobHours"] > 0


def test_the_estimate_uses_the_fit_checks_prediction_for_exactly_this_configuration(tmp_path):
    from domain.perf import fit_results

    _, inputs = run_workloads("dev")
    job = job_of(inputs["entrypoint"])
    result = recorded_fit_check(job)
    prediction = result.prediction
    # From a file the stack points at.
    (tmp_path / "result.json").write_text(result.to_json())
    outputs = run_workloads("dev", fitCheckResult=str(tmp_path / "result.json"))[0].outputs
    assert outputs["estimateSource"] == "prediction" and outputs["assumedMfu"] is None
    assert outputs["estimatedStepSeconds"] == round(prediction.step_seconds, 3)
    assert outputs["predictedMfu"] == round(prediction.mfu, 4)
    estimate = RunEstimate.from_props(run_workloads("dev", fitCheckResult=str(tmp_path / "result.json"))[1]["estimate"])
    assert (estimate.source, estimate.step_seconds, estimate.mfu) == (
        "prediction",
        prediction.step_seconds,
        prediction.mfu,
    )
    assert prediction.band is not None
    assert (estimate.step_seconds_low, estimate.step_seconds_high) == prediction.band.step_range(
        prediction.step_seconds
    )
    assert outputs["estimatedJobDollars"] == pytest.approx(prediction.step_seconds * 100 / 3600 * 32 * 2.70, abs=0.01)
    # From this checkout's fit-check cache, where `python -m trainer.fit_check` records it.
    fit_results.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    (fit_results.CACHE_DIR / f"{fit_results.cache_key(job, fit_results.libtpu_flags(job))}.json").write_text(
        result.to_json()
    )
    assert run_workloads("dev")[0].outputs["estimatedStepSeconds"] == round(prediction.step_seconds, 3)
    # Another configuration (a different batch) has no prediction: the assumed MFU again.
    outputs = run_workloads("dev", maxtextOverrides={"per_device_batch_size": 2})[0].outputs
    assert outputs["estimateSource"] == "assumedMfu" and outputs["predictedMfu"] is None


def test_a_job_across_slices_says_what_the_dcn_costs_and_what_one_slice_more_would(tmp_path):
    import dataclasses

    from domain.perf.hlo_profile import Scope, StepProfile
    from domain.perf.multislice_runs import dcn_band

    _, inputs = run_workloads("dev")  # the 8B preset on 2 x v6e-16, data parallel across slices
    job = job_of(inputs["entrypoint"])
    recorded = recorded_fit_check(job)
    sends = Scope("gradients", runs=1, dcn_bytes=1e9, dcn_transfers=200, dcn_steps=400)
    step = StepProfile.from_json(recorded.profile)
    result = dataclasses.replace(recorded, profile=StepProfile((*step.scopes, sends)).to_json())
    (tmp_path / "result.json").write_text(result.to_json())
    outputs = run_workloads("dev", fitCheckResult=str(tmp_path / "result.json"))[0].outputs
    cost = result.prediction.multislice
    assert cost is not None and cost.slices == 2 and cost.dcn_seconds > 0
    assert outputs["estimatedStepSeconds"] == round(cost.step_seconds, 3)
    assert outputs["dcnShare"] == round(cost.share, 4)
    assert outputs["multisliceSlowdownPercent"] == round(cost.slowdown_percent, 2) < 0
    assert outputs["multisliceBand"] == dcn_band("data").describe()
    assert outputs["nextSliceStepSeconds"] == round(cost.next_step_seconds, 3) > outputs["estimatedStepSeconds"]
    # $2.70 per chip-hour on 32 chips; a chip's tokens per step are the same on 3 slices.
    tokens = result.tokens_per_chip * 32
    dollars = 2.70 * 32 * cost.step_seconds / 3600 / tokens * 1e6
    assert outputs["dollarsPerMillionTokens"] == pytest.approx(dollars, abs=1e-4)
    assert outputs["nextSliceDollarsPerMillionTokens"] == pytest.approx(
        dollars * cost.next_step_seconds / cost.step_seconds, abs=1e-4
    )
    # No fit check of the configuration: no DCN term, and the band says why.
    outputs = run_workloads("dev", maxtextOverrides={"per_device_batch_size": 2})[0].outputs
    assert outputs["multisliceBand"] == "no fit check of this configuration: the DCN term is read from its compile"
    assert outputs["dcnShare"] is None and outputs["nextSliceStepSeconds"] is None
    # One slice: nothing crosses slices.
    outputs = run_workloads("dev", infra_outputs={**INFRA_OUTPUTS, "slices": 1})[0].outputs
    assert outputs["multisliceBand"] is None and outputs["dollarsPerMillionTokens"] is not None


def test_elastic_and_overrides_reach_the_trainer():
    _, inputs = run_workloads("dev", elastic=True, maxtextOverrides={"steps": 300}, maxFailures=5)
    assert shlex.split(inputs["entrypoint"])[2] == "trainer.maxtext_elastic_trainer"
    job = job_of(inputs["entrypoint"])
    assert (job.num_workers, job.max_failures, job.maxtext_overrides["steps"]) == ((4, 8), 5, "300")
    assert inputs["total_steps"] == 300


def test_local_stack_runs_the_tiny_preset_on_a_local_head():
    run, inputs = run_workloads("local")
    assert inputs["address"] == "http://127.0.0.1:8265" and inputs.get("gke") is None
    job = job_of(inputs["entrypoint"])
    assert (job.preset, job.use_tpu, job.num_workers) == ("tiny-cpu", False, 1)
    assert job.checkpoint_root == str(PROJECT_ROOT / ".runs")
    assert not run.of_type("pulumi:pulumi:StackReference")


def test_unknown_maxtext_key_stops_before_the_job_is_registered():
    monitor = RecordingMonitor(stack_outputs={INFRA_STACK: INFRA_OUTPUTS})
    config = stack_config("local", WORKLOADS_DIR)
    config[f"{PROJECT}:maxtextOverrides"] = {"lerning_rate": 1}
    # A stack file's problem: refused with the settings, before anything is registered.
    with pytest.raises(WorkloadSettingsError, match="did you mean 'learning_rate'"):
        run_program(lambda: build(read_settings()), config, project=PROJECT, stack="local", monitor=monitor)
    assert not [r for r in monitor.registrations if r.type == RAY_JOB]


def test_a_preset_for_another_accelerator_is_refused():
    monitor = RecordingMonitor(stack_outputs={INFRA_STACK: {**INFRA_OUTPUTS, "accelerator": "v5p"}})
    config = stack_config("dev", WORKLOADS_DIR)
    # Found in the infra stack's outputs, the refusal is the domain's error itself, unwrapped.
    with pytest.raises(JobError) as caught:
        run_program(lambda: build(read_settings()), config, project=PROJECT, stack="dev", monitor=monitor)
    assert type(caught.value) is JobError
    assert str(caught.value).startswith("invalid training job:\n  - preset = ")  # no SDK wrapping
    assert_one_problem(
        caught.value.problems,
        setting="preset",
        value="'llama3-8b'",
        phrase="is for TPU v6e, but the infra stack's cluster has v5p",
        fix="point infraStack at an infra stack with v6e slices",
    )
    assert not [r for r in monitor.registrations if r.type == RAY_JOB]


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({}, "set exactly one of infraStack"),
        ({"address": "http://x:8265", "infraStack": "o/p/s", "preset": "tiny-cpu"}, "set exactly one of infraStack"),
        ({"address": "127.0.0.1:8265", "preset": "tiny-cpu"}, "address = '127.0.0.1:8265' is not a URL"),
        ({"address": "http://x:8265"}, "preset is required with address"),
        ({"infraStack": "o/p/s", "preset": "gpt"}, "preset = 'gpt' is not valid"),
        ({"infraStack": "o/p/s", "timeoutSeconds": 0}, "timeoutSeconds = 0 is out of range; use 1 or more seconds"),
        ({"infraStack": "o/p/s", "maxtextOverrides": "[1, 2]"}, "maxtextOverrides = [1, 2] is not an object"),
        ({"infraStack": "o/p/s", "elastic": "maybe"}, "elastic = 'maybe' is not a boolean"),
        ({"infraStack": "o/p/s", "slices": 4}, "maxtext-tpu-workloads:slices is not a setting of this project"),
        ({"infraStack": "o/p/s", "assumedMfu": "46%"}, "assumedMfu = '46%' is not a number; use a fraction in (0, 1]"),
    ],
)
def test_bad_workloads_config_is_refused(raw, expected):
    with pytest.raises(WorkloadSettingsError) as caught:
        workload_settings(raw)
    assert any(expected in problem for problem in caught.value.problems), caught.value.problems


def test_a_missing_trainer_program_is_refused_before_submission(monkeypatch):
    from workloads import job_inputs, job_resolution

    settings = workload_settings({"address": "http://127.0.0.1:8265", "preset": "tiny-cpu"}, stack="local")
    job = job_resolution.resolve_local(settings, warn=pytest.fail)  # no data: nothing to warn of
    monkeypatch.setattr(job_inputs.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        JobError, match=r"the trainer program trainer\.maxtext_multi_slice_trainer is not in this checkout"
    ):
        job_inputs.ray_job_inputs(job, settings)


@pytest.mark.parametrize("stack", ["dev", "local"])
def test_a_secret_runtime_env_stays_secret_on_the_job(stack):
    run, inputs = run_workloads(stack, secrets=("runtimeEnv",), runtimeEnv={"env_vars": {"WANDB_API_KEY": "k-123"}})
    job = run.one(RAY_JOB)
    from pulumi.runtime.rpc import unwrap_rpc_secret

    assert unwrap_rpc_secret(inputs["runtime_env"]) == {"env_vars": {"WANDB_API_KEY": "k-123"}}
    # Only what holds the secret (the SDK itself keeps the pickled provider secret).
    assert job.secret_inputs - {"__provider"} == {"runtime_env"}
    guard = run.one(RAY_JOB_GUARD)
    assert guard.secret_inputs - {"__provider"} == set()
    assert guard.inputs["job_id"].startswith(f"pulumi-{PROJECT}-{stack}-")
    assert "k-123" not in json.dumps(run.outputs, default=str)


def test_any_other_secret_setting_keeps_the_whole_job_description_secret():
    run, _ = run_workloads("dev", secrets=("maxtextOverrides",), maxtextOverrides={"steps": 7})
    assert {"entrypoint", "metadata", "checkpoint_dir"} <= run.one(RAY_JOB).secret_inputs


def test_the_guard_is_registered_before_the_job_and_names_its_submission_id():
    run, inputs = run_workloads("dev")
    guard = run.one(RAY_JOB_GUARD)
    job = run.one(RAY_JOB)
    assert run.registrations.index(guard) < run.registrations.index(job)
    assert guard.urn in job.dependencies
    from workloads.ray_job.record import submission_id

    assert inputs["project"] == PROJECT and inputs["stack"] == "dev"
    assert guard.inputs["job_id"] == submission_id(inputs)
    assert guard.inputs["gke"] == inputs["gke"]


@pytest.mark.parametrize("organization", ["acme", None])
def test_the_job_id_names_the_organization_project_and_stack(monkeypatch, organization):
    """Two projects' (or organizations') `dev` stacks with the same job get two jobs, not one.
    Under mocks the SDK's organization is None unless given; a real engine always gives one."""
    import pulumi

    from workloads.ray_job.migration import legacy_submission_id
    from workloads.ray_job.record import submission_id

    monkeypatch.setattr(pulumi, "get_organization", lambda: organization)
    run, inputs = run_workloads("dev")
    assert (inputs.get("organization"), inputs["project"], inputs["stack"]) == (organization, PROJECT, "dev")
    guard = run.one(RAY_JOB_GUARD)
    named = f"{organization}-{PROJECT}-dev" if organization else f"{PROJECT}-dev"
    assert guard.inputs["job_id"].startswith(f"pulumi-{named}-")
    assert guard.inputs["job_id"] != submission_id({**inputs, "project": "another-project"})
    assert guard.inputs["job_id"] != submission_id({**inputs, "organization": "another-org"})
    # The earlier form, for a guard written by the first releases (see test_ray_job_migration.py).
    assert guard.inputs["previous_job_id"] == legacy_submission_id(inputs)
    assert guard.inputs["previous_job_id"].startswith("pulumi-dev-")


def test_every_exported_job_output_is_a_stack_output():
    run, _ = run_workloads("local")
    assert {camel_case(name) for name in EXPORTED} <= set(run.outputs)
    assert camel_case("tokens_per_second_per_device") == "tokensPerSecondPerDevice"


def test_the_job_outputs_keep_the_names_and_order_state_has_always_had():
    """JobResult's fields are the RayJob's outputs: its bases give them in the order state and
    the smoke run's line have always had."""
    assert OUTPUTS == (
        "submission_id",
        "status",
        "message",
        "start_time",
        "end_time",
        "duration_seconds",
        "steps_completed",
        "final_loss",
        "diverged",
        "tokens_per_second_per_device",
        "tflops_per_device",
        *DATA_OUTPUTS,
        *GOODPUT_OUTPUTS,
        "checkpoint_dir",
        "tensorboard_dir",
        "dashboard_url",
        "report_path",
        "page_written",
        "input_digests",
    )


def test_the_worker_group_reads_back_as_written_with_the_engines_floats_whole():
    _, inputs = run_workloads("dev")
    group = inputs["worker_group"]
    assert group == {"slices": 2, "min_slices": 2, "hosts_per_slice": 4, "resources_per_worker": {"TPU": 4}}
    job = JobRequest.from_props({"worker_group": {**group, "slices": 2.0}})
    assert job.worker_group == WorkerGroup(slices=2, min_slices=2, hosts_per_slice=4, resources_per_worker={"TPU": 4})
    assert job.props(["worker_group"]) == {"worker_group": group}


def test_the_docs_name_every_output_of_the_workloads_stack():
    """docs/training.md's Outputs list names the job's outputs, and docs/capacity.md the cost
    outputs: together, exactly the stack's outputs."""
    run, _ = run_workloads("local")
    training = " ".join((PROJECT_ROOT / "docs" / "training.md").read_text().split())
    outputs = training.split("**Outputs:**", 1)[1].split("Their names are written once", 1)[0]
    named = set(re.findall(r"`([a-z][A-Za-z]+)`", outputs))
    capacity = " ".join((PROJECT_ROOT / "docs" / "capacity.md").read_text().split())
    assert named == set(run.outputs) - set(COST_OUTPUTS)
    assert all(f"`{name}`" in capacity for name in COST_OUTPUTS)


def test_the_infra_stack_cluster_id_and_token_secret_reach_the_job_target():
    outputs = {
        **INFRA_OUTPUTS,
        "clusterId": "projects/p/locations/l/clusters/c",
        "rayAuthSecret": "maxtext-tpu-cluster",
    }
    _, inputs = run_workloads("dev", infra_outputs=outputs)
    assert inputs["gke"]["cluster_id"] == "projects/p/locations/l/clusters/c"
    assert inputs["gke"]["auth_secret"] == "maxtext-tpu-cluster"


def test_a_cluster_job_is_told_the_bucket_behind_its_checkpoint_mount():
    """Where the provider uploads a GKE run's TensorBoard scalars (workloads/ray_job/bucket_scalars.py)."""
    outputs = {**INFRA_OUTPUTS, "checkpointBucketUrl": "gs://acme-ckpt"}
    _, inputs = run_workloads("dev", infra_outputs=outputs)
    assert inputs["checkpoint_bucket"] == {"mount": "/data", "url": "gs://acme-ckpt"}
    assert inputs["checkpoint_dir"].startswith("/data/")
    assert JobRequest.from_props(inputs).checkpoint_bucket == CheckpointBucket(mount="/data", url="gs://acme-ckpt")
    # An infra stack that does not export the bucket, and a local head, give none.
    assert run_workloads("dev")[1].get("checkpoint_bucket") is None
    assert run_workloads("local")[1].get("checkpoint_bucket") is None


def test_the_job_description_gives_exactly_the_job_inputs_the_resource_declares():
    from workloads import job_inputs, job_resolution
    from workloads.ray_job.record import JOB_INPUTS

    settings = workload_settings({"address": "http://127.0.0.1:8265", "preset": "tiny-cpu"}, stack="local")
    assert set(job_inputs.ray_job_inputs(job_resolution.resolve_local(settings, warn=pytest.fail), settings)) == set(
        JOB_INPUTS
    )


def test_a_deadline_shorter_than_the_predicted_run_is_warned_of_with_by_how_much(caplog):
    """A warning at preview, not a refusal: the estimate has an error band (docs/training.md)."""
    caplog.set_level("WARNING")
    run, _ = run_workloads("dev", timeoutSeconds="60")
    hours, step = run.outputs["estimatedJobHours"], run.outputs["estimatedStepSeconds"]
    [warning] = [record.getMessage() for record in caplog.records if "timeoutSeconds" in record.getMessage()]
    predicted = round(hours * 3600)
    assert warning.startswith(
        f"timeoutSeconds = 60 is shorter than the run this stack predicts: 100 steps of about {step:g} s"
    )
    assert f"take about {predicted} s, {predicted - 60} s" in warning
    assert f"stopped after about {int(60 // step)} steps; raise timeoutSeconds to at least" in warning
    caplog.clear()
    run_workloads("dev")  # the default deadline, 6 hours, outlasts the predicted run
    assert not [record for record in caplog.records if "timeoutSeconds" in record.getMessage()]
