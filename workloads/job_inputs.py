"""The RayJob's inputs for a resolved job: the same for `pulumi up` and for the local smoke run."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from domain.config.stack_outputs import ClusterOutputs
from domain.config.workload_settings import NAMES, WorkloadSettings
from domain.config.workload_settings import key as setting_key
from domain.paths import PROJECT_ROOT
from domain.perf.capacity import job_cost
from domain.perf.fit_results import FitResult, configuration, libtpu_flags
from domain.perf.maxtext_check import (
    counted_by_maxtext,
    derived_values,
    maxtext_problems,
    model_flops,
    recorded_result,
)
from domain.tpu.capacity_choices import SPOT
from domain.tpu.tpu_catalog import accelerator_by_ray_type
from domain.training.data_files import DataCheck, FileView, check_job_data
from domain.training.job import JobError, JobSpec, resolve_job
from domain.training.presets import PRESETS
from workloads.bucket_files import BucketFiles
from workloads.infra_outputs import gke_target
from workloads.jobs_api import JobsApiError, operator_session


def local_checkpoint_root(settings: WorkloadSettings) -> str:
    """A relative `checkpointRoot` is relative to the project, wherever Pulumi runs from."""
    root = Path(settings.checkpoint_root)
    return str(root if root.is_absolute() else PROJECT_ROOT / root)


def _presets_for(accelerator_name: str) -> str:
    """What to use on a cluster of `accelerator_name` TPUs."""
    names = [p.name for p in PRESETS.values() if p.accelerator_name == accelerator_name]
    if names:
        return f"use one for {accelerator_name}: {', '.join(names)}"
    supported = sorted({p.accelerator_name for p in PRESETS.values() if p.accelerator_name})
    return (
        f"this checkout has no preset for {accelerator_name}; point infraStack at an infra stack "
        f"with {' or '.join(supported)} slices"
    )


def resolve_for_cluster(settings: WorkloadSettings, cluster: ClusterOutputs) -> JobSpec:
    """Resolves the job for the shape the infra stack built (its outputs in `cluster`). Raises
    JobError listing every problem."""
    infra_stack = settings.infra_stack or setting_key(NAMES.infra_stack)
    preset = settings.preset or cluster.preset
    accelerator = cluster.accelerator
    chosen = PRESETS.get(preset)
    if chosen is None:  # the setting is checked with the stack's settings: this is the output
        raise JobError(
            [
                f"preset = {preset!r} (the infra stack {infra_stack}'s preset output) is not a preset "
                f"of this checkout; set preset in this stack: {_presets_for(accelerator)}"
            ]
        )
    if chosen.accelerator_name != accelerator:
        runs_on = f"TPU {chosen.accelerator_name}" if chosen.runs_on_tpu else "CPU"
        raise JobError(
            [
                f"preset = {preset!r} is for {runs_on}, but the infra stack's cluster has "
                f"{accelerator}; {_presets_for(accelerator)}"
            ]
        )
    problems = _cluster_data_problems(settings, cluster)
    if problems:
        raise JobError(problems)
    return _settings_job(
        settings,
        preset,
        checkpoint_root=cluster.checkpoint_root,
        slices=cluster.slices,
        topology=cluster.topology,
        dataset_root=cluster.dataset_root or "",
    )


# Capacity whose nodes can be taken back mid-run.
PREEMPTIBLE_CAPACITY = (SPOT,)


def _cluster_data_problems(settings: WorkloadSettings, cluster: ClusterOutputs) -> list[str]:
    """The data settings against what the infra stack has: a dataset bucket for datasetFiles,
    and capacity that cannot be preempted for a stream that cannot resume."""
    infra_stack = settings.infra_stack or setting_key(NAMES.infra_stack)
    files_key = setting_key(NAMES.dataset_files)
    problems = []
    if settings.dataset_files is not None and not cluster.dataset_root:
        problems.append(
            f"{files_key} = {settings.dataset_files!r}, but the infra stack {infra_stack} mounts no dataset bucket "
            "(no datasetRoot output); set datasetBucket on the infra stack (`pulumi config set datasetBucket BUCKET` "
            "in the project root) and run pulumi up there"
        )
    preemptible = [choice for choice in cluster.capacity or [] if choice in PREEMPTIBLE_CAPACITY]
    if settings.hugging_face_dataset is not None and preemptible and not settings.hugging_face_not_resumable:
        problems.append(
            f"{setting_key(NAMES.hugging_face_dataset)} = {settings.hugging_face_dataset!r} on the infra stack's "
            f"{preemptible[0]} capacity: a preempted job resumes from its checkpoint, but a Hugging Face stream starts "
            "again from its beginning, repeating examples; prepare the corpus as files (python -m "
            f"trainer.prepare_data) and set {files_key}, or acknowledge it with `pulumi config set "
            f"{setting_key(NAMES.hugging_face_not_resumable)} true`"
        )
    return problems


def resolve_local(settings: WorkloadSettings) -> JobSpec:
    assert settings.preset is not None
    job = _settings_job(settings, settings.preset, checkpoint_root=local_checkpoint_root(settings))
    problems = local_data_problems(job)
    if problems:
        raise JobError(problems)
    return job


def local_data_problems(job: JobSpec) -> list[str]:
    """A local job's data, checked where it is (this machine) before anything is submitted:
    the files, the tokenizer against the model MaxText resolves, the corpus against the run, and
    the data of the run's earlier runs. (On GKE the trainer's driver checks the same before the
    first step: docs/training.md.)"""
    if job.dataset is None:
        return []
    return _data_check(job).problems


def _data_check(job: JobSpec, files: FileView | None = None) -> DataCheck:
    """The job's data files in `files` (this machine's by default), against the global batch and
    vocabulary MaxText derives for the job."""
    derived = derived_values(job)
    return check_job_data(
        job,
        global_batch=derived.get("global_batch_size_to_train_on"),
        model_vocab=derived.get("vocab_size"),
        files=files,
    )


def _settings_job(
    settings: WorkloadSettings,
    preset: str,
    *,
    checkpoint_root: str,
    slices: int | None = None,
    topology: str | None = None,
    dataset_root: str = str(PROJECT_ROOT),
) -> JobSpec:
    """The job the stack's settings describe on its target (slices and topology: the preset's
    when None), checked by MaxText."""
    job = resolve_job(
        preset,
        run_name=settings.run_name_for(preset),
        checkpoint_root=checkpoint_root,
        slices=slices,
        topology=topology,
        elastic=settings.elastic,
        min_slices=settings.min_slices,
        max_failures=settings.max_failures,
        max_preemptions=settings.max_preemptions,
        overrides=settings.maxtext_overrides,
        dataset=settings.dataset(dataset_root),
    )
    return checked_by_maxtext(job, settings)


def checked_by_maxtext(job: JobSpec, settings: WorkloadSettings) -> JobSpec:
    """`job`, once MaxText's own config layer has accepted it on the job's device target (see
    domain/perf/maxtext_check.py: cached, so only a new configuration waits for MaxText). Raises
    JobError with MaxText's reasons otherwise, or when MaxText could not be asked."""
    problems = maxtext_problems(job, settings.maxtext_overrides, secret=settings.is_secret(NAMES.maxtext_overrides))
    if problems:
        raise JobError(problems)
    return job


def bucket_data_check(job: JobSpec, cluster: ClusterOutputs) -> tuple[list[str], str | None]:
    """A GKE job's data files, checked in the buckets behind the cluster's mounts before anything
    is submitted (workloads/bucket_files.py): (the problems, a warning when the buckets could not
    be asked). The job's driver checks the same files again before the first step."""
    if job.dataset is None or job.dataset.files is None:
        return [], None
    mounts = {
        str(cluster.dataset_root): cluster.dataset_uri or "",
        cluster.checkpoint_root: cluster.checkpoint_bucket_url or "",
    }
    if not all(mounts.values()):
        return [], "the infra stack does not say which buckets back its mounts (re-run pulumi up on it)"
    try:
        with operator_session(gke_target(cluster)) as session:
            checked = _data_check(job, BucketFiles(mounts, session))
    except (OSError, JobsApiError) as error:
        return [], (
            f"the data files could not be checked in {mounts[str(cluster.dataset_root)]} before submitting ({error}); "
            "the job's driver checks them before the first step"
        )
    return checked.problems, None


def worker_group(job: JobSpec) -> dict[str, Any]:
    """What the job's worker group asks the cluster for: the RayJob counts the slices that are up
    while the job waits for them, and names them when it could not get them."""
    return {
        "slices": job.slices,
        "min_slices": job.min_slices,
        "hosts_per_slice": job.hosts_per_slice,
        "resources_per_worker": job.resources_per_worker,
    }


def ray_job_inputs(job: JobSpec, settings: WorkloadSettings) -> dict[str, Any]:
    """The RayJob's JOB_INPUTS for a resolved job. Refuses a job whose trainer program is
    missing here: the image is built from this tree, so a job naming a program that is not in it
    would only fail on the cluster."""
    if importlib.util.find_spec(job.trainer_module) is None:
        raise JobError(
            [
                f"the trainer program {job.trainer_module} is not in this checkout; restore "
                f"{job.trainer_module.replace('.', '/')}.py (and run ./scripts/setup)"
            ]
        )
    return {
        "entrypoint": job.entrypoint(),
        "runtime_env": dict(settings.runtime_env) or None,
        "metadata": {"preset": job.preset, "run_name": job.run_name},
        "queue_timeout_seconds": settings.queue_timeout_seconds,
        "timeout_seconds": settings.timeout_seconds,
        "worker_group": worker_group(job),
        "total_steps": job.total_steps,
        "checkpoint_dir": job.run_directory,
    }


# The stack's estimate outputs, in order (workloads/program.py exports them).
COST_OUTPUTS = (
    "flopsPerStep",
    "flopsSource",
    "estimateSource",
    "assumedMfu",
    "predictedMfu",
    "estimatedStepSeconds",
    "estimatedJobHours",
    "estimatedJobDollars",
    "costBasis",
)
PREDICTION, ASSUMED_MFU = "prediction", "assumedMfu"


def fit_check_result(job: JobSpec, settings: WorkloadSettings) -> FitResult | None:
    """The fit check of exactly this job's configuration: the file `fitCheckResult` names (it
    must be this configuration's), else this checkout's fit-check cache, else None."""
    if settings.fit_check_result is None:
        return recorded_result(job)
    path, result_key = PROJECT_ROOT / settings.fit_check_result, setting_key(NAMES.fit_check_result)
    try:
        result = FitResult.from_json(path.read_text())
    except (OSError, ValueError, TypeError) as error:
        raise JobError(
            [
                f"{result_key} = {settings.fit_check_result!r} cannot be read as a fit check's result ({error}); "
                "write one with `python -m trainer.fit_check --preset PRESET ... --output FILE`, or unset it"
            ]
        ) from None
    expected = configuration(job, libtpu_flags(job))
    different = sorted(
        key
        for key in expected.keys() | result.configuration.keys()
        if expected.get(key) != result.configuration.get(key)
    )
    if different:
        raise JobError(
            [
                f"{result_key} = {settings.fit_check_result!r} was compiled for another configuration than this "
                f"job's (they differ in {', '.join(different)}); rerun `python -m trainer.fit_check --preset "
                f"{job.preset} --topology {job.topology} --slices {job.slices} KEY=VALUE ... --output FILE` with "
                f"this job's {setting_key(NAMES.maxtext_overrides)}, or unset {result_key}"
            ]
        )
    return result


def deadline_warning(estimate: Mapping[str, Any], steps: int | None, timeout_seconds: int) -> str | None:
    """The run the estimate predicts against timeoutSeconds: a job predicted to outlast its
    deadline would be stopped there. The estimate has an error band, so this is a warning."""
    hours, step = estimate.get("estimatedJobHours"), estimate.get("estimatedStepSeconds")
    if not hours or not step or not steps:
        return None
    predicted = hours * 3600
    if predicted <= timeout_seconds:
        return None
    if estimate.get("estimateSource") == PREDICTION:
        source = "the fit check's predicted step time"
    else:
        source = f"an assumed MFU of {estimate.get('assumedMfu')}"
    return (
        f"timeoutSeconds = {timeout_seconds} is shorter than the run this stack predicts: {steps} steps of about "
        f"{step:g} s ({source}) take about {predicted:.0f} s, {predicted - timeout_seconds:.0f} s "
        f"({(predicted / timeout_seconds - 1) * 100:.0f}%) more, so the job would be stopped after about "
        f"{int(timeout_seconds // step)} steps; raise timeoutSeconds to at least {math.ceil(predicted * 1.25)} "
        "(the prediction plus 25%), or lower steps (a warning: the prediction has an error band)"
    )


def cost_estimate(
    job: JobSpec, settings: WorkloadSettings, price_per_chip_hour: float | None, cost_basis: str | None = None
) -> dict[str, Any]:
    """What the job should cost: its steps x an estimated step time, at the chips' hourly price
    (None when the infra stack has none: `cost_basis`, its costBasis output, says why).
    The step time is the fit check's prediction for this exact configuration when there is one
    (estimateSource `prediction`), else model FLOPs per step over what the chips deliver at the
    assumed MFU (`assumedMfu`). The FLOPs (and the prediction's MFU) are MaxText's count for the
    configuration (flopsSource `maxtext`; domain/perf/capacity.py names the fallback). None for CPU
    jobs."""
    if not job.use_tpu or job.total_steps is None:
        return dict.fromkeys(COST_OUTPUTS)
    flops = model_flops(job)
    result = fit_check_result(job, settings)
    if result is not None:
        result = counted_by_maxtext(job, result)  # a result file recorded with another count
    prediction = result.prediction if result is not None else None
    estimate = job_cost(
        flops_per_step=flops.per_step,
        steps=job.total_steps,
        chips=flops.chips,
        peak_tflops_per_chip=accelerator_by_ray_type(job.accelerator_type or "").peak_bf16_tflops_per_chip,
        assumed_mfu=settings.assumed_mfu,
        price_per_chip_hour_usd=price_per_chip_hour or 0.0,
        step_seconds=prediction.step_seconds if prediction else None,
    )
    return {
        "flopsPerStep": flops.per_step,
        "flopsSource": flops.source,
        "estimateSource": PREDICTION if prediction else ASSUMED_MFU,
        "assumedMfu": None if prediction else settings.assumed_mfu,
        "predictedMfu": round(prediction.mfu, 4) if prediction else None,
        "estimatedStepSeconds": round(estimate.step_seconds or 0, 3),
        "estimatedJobHours": round(estimate.job_hours or 0, 3),
        "estimatedJobDollars": estimate.job_dollars if price_per_chip_hour is not None else None,
        "costBasis": cost_basis,
    }
