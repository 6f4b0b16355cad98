"""Resolving the job the stack's settings describe on its target (the infra stack's cluster or this
machine) and checking it before anything is submitted: presets, data, and MaxText's own check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from domain.config.stack_outputs import ClusterOutputs
from domain.config.workload_settings import key as setting_key
from domain.paths import PROJECT_ROOT
from domain.perf.maxtext_check import derived_values, maxtext_problems
from domain.tpu.capacity_choices import SPOT
from domain.training.data_files import DataCheck, FileView, check_job_data
from domain.training.job import JobError, JobSpec, resolve_job
from domain.training.presets import PRESETS
from domain.workload_settings import WorkloadSettings
from workloads.bucket_files import BucketFiles
from workloads.infra_outputs import gke_target
from workloads.jobs_api.errors import JobsApiError
from workloads.jobs_api.gke_access import operator_session


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
    infra_stack = settings.infra_stack or setting_key(WorkloadSettings.infra_stack)
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
    infra_stack = settings.infra_stack or setting_key(WorkloadSettings.infra_stack)
    files_key = setting_key(WorkloadSettings.dataset_files)
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
            f"{setting_key(WorkloadSettings.hugging_face_dataset)} = {settings.hugging_face_dataset!r} on the infra stack's "
            f"{preemptible[0]} capacity: a preempted job resumes from its checkpoint, but a Hugging Face stream starts "
            "again from its beginning, repeating examples; prepare the corpus as files (python -m "
            f"trainer.prepare_data) and set {files_key}, or acknowledge it with `pulumi config set "
            f"{setting_key(WorkloadSettings.hugging_face_not_resumable)} true`"
        )
    return problems


def resolve_local(settings: WorkloadSettings, *, warn: Callable[[str], None]) -> JobSpec:
    """The local stack's job, its data checked where it is (this machine) before anything is
    submitted: the files, the tokenizer against the model MaxText resolves, the corpus against
    the run, and the data of the run's earlier runs (on GKE the trainer's driver checks the same
    before the first step: docs/training.md). Raises JobError with the problems; passes each
    warning (data that may run short, tokens truncation drops) to `warn`."""
    assert settings.preset is not None
    job = _settings_job(settings, settings.preset, checkpoint_root=local_checkpoint_root(settings))
    if job.dataset is not None:
        checked = _data_check(job)
        if checked.problems:
            raise JobError(checked.problems)
        for warning in checked.warnings:
            warn(warning)
    return job


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
    when None), once MaxText's own config layer has accepted it on the job's device target (see
    domain/perf/maxtext_check.py: cached, so only a new configuration waits for MaxText). Raises
    JobError with MaxText's reasons otherwise, or when MaxText could not be asked."""
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
        compile_cache=settings.compile_cache,
    )
    problems = maxtext_problems(
        job, settings.maxtext_overrides, secret=settings.is_secret(WorkloadSettings.maxtext_overrides)
    )
    if problems:
        raise JobError(problems)
    return job


def bucket_data_check(job: JobSpec, cluster: ClusterOutputs) -> tuple[list[str], list[str]]:
    """A GKE job's data files, checked in the buckets behind the cluster's mounts before anything
    is submitted (workloads/bucket_files.py): (the problems, the warnings: the check's own, or
    that the buckets could not be asked). The job's driver checks the same files again before
    the first step."""
    if job.dataset is None or job.dataset.files is None:
        return [], []
    mounts = {
        str(cluster.dataset_root): cluster.dataset_uri or "",
        cluster.checkpoint_root: cluster.checkpoint_bucket_url or "",
    }
    if not all(mounts.values()):
        return [], ["the infra stack does not say which buckets back its mounts (re-run pulumi up on it)"]
    try:
        with operator_session(gke_target(cluster)) as session:
            checked = _data_check(job, BucketFiles(mounts, session))
    except (OSError, JobsApiError) as error:
        return [], [
            f"the data files could not be checked in {mounts[str(cluster.dataset_root)]} before submitting ({error}); "
            "the job's driver checks them before the first step"
        ]
    return checked.problems, checked.warnings
