"""What the RayJob is given for a resolved job, the same for `pulumi up` and the local smoke run:
its inputs, and the fit check, deadline warning and cost estimate exported beside them (`plan`)."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from domain.config.workload_settings import key as setting_key
from domain.paths import PROJECT_ROOT
from domain.perf.capacity import job_cost
from domain.perf.cold_start import cold_start_cost
from domain.perf.fit_results import FitResult, configuration, runtime_flags
from domain.perf.maxtext_check import counted_by_maxtext, model_flops, recorded_result
from domain.perf.step_time import Prediction
from domain.ray.compiler_flags import CompilerFlags, added_to_workers
from domain.setting import camel_case
from domain.tpu.tpu_catalog import accelerator_by_ray_type
from domain.training.job import JobError, JobSpec
from domain.training.run_estimate import RunEstimate
from domain.workload_settings import WorkloadSettings
from workloads.ray_job.record import JOB_INPUTS, CheckpointBucket, JobRequest, WorkerGroup


def ray_job_inputs(job: JobSpec, settings: WorkloadSettings) -> dict[str, Any]:
    """The RayJob's JOB_INPUTS for a resolved job, as the wire holds them. Refuses a job whose
    trainer program is missing here: the image is built from this tree, so a job naming a program
    that is not in it would only fail on the cluster."""
    if importlib.util.find_spec(job.trainer_module) is None:
        raise JobError(
            [
                f"the trainer program {job.trainer_module} is not in this checkout; restore "
                f"{job.trainer_module.replace('.', '/')}.py (and run ./scripts/setup)"
            ]
        )
    request = JobRequest(
        entrypoint=job.entrypoint(),
        runtime_env=dict(settings.runtime_env) or None,
        metadata={"preset": job.preset, "run_name": job.run_name},
        queue_timeout_seconds=settings.queue_timeout_seconds,
        timeout_seconds=settings.timeout_seconds,
        worker_group=WorkerGroup.of(job),
        total_steps=job.total_steps,
        checkpoint_dir=job.run_directory,
    )
    return request.props(JOB_INPUTS)


PREDICTION, ASSUMED_MFU = "prediction", "assumedMfu"


@dataclass(frozen=True)
class CostEstimate:
    """What the job should cost: each field one output of the workloads stack, under its camelCase
    name (None for a CPU job, and for the dollars where the infra stack has no price)."""

    flops_per_step: float | None = None
    flops_source: str | None = None
    estimate_source: str | None = None  # PREDICTION or ASSUMED_MFU
    assumed_mfu: float | None = None
    predicted_mfu: float | None = None
    estimated_step_seconds: float | None = None
    estimated_job_hours: float | None = None
    estimated_job_dollars: float | None = None
    cost_basis: str | None = None
    # A start from zero before the first step (domain/perf/cold_start.py): node boot, image pull
    # and compile, cold (nothing cached) and warm (image streamed, compilation cache hit); the sums
    # leave out a phase with no figure, which coldStartBasis names.
    cold_start_seconds: float | None = None
    cold_start_dollars: float | None = None
    warm_start_seconds: float | None = None
    warm_start_dollars: float | None = None
    cold_start_phases: list[dict[str, Any]] | None = None
    cold_start_basis: str | None = None
    # Across slices (domain/perf/dcn.py): the DCN term's share of the predicted step, each chip's
    # throughput against one slice, the band the published runs give it, and one slice more.
    dollars_per_million_tokens: float | None = None
    dcn_share: float | None = None
    multislice_slowdown_percent: float | None = None
    multislice_band: str | None = None
    next_slice_step_seconds: float | None = None
    next_slice_dollars_per_million_tokens: float | None = None

    def outputs(self) -> dict[str, Any]:
        return {camel_case(field.name): getattr(self, field.name) for field in fields(self)}


# The stack's estimate outputs, in order (workloads/program.py exports them).
COST_OUTPUTS = tuple(camel_case(field.name) for field in fields(CostEstimate))


def _fit_check_command(job: JobSpec, flags: CompilerFlags) -> str:
    """The fit check that compiles with the job's flags, or what keeps one from it."""
    acc = accelerator_by_ray_type(job.accelerator_type or "")
    added = added_to_workers(flags, acc)
    if added is None:
        return (
            "its runtimeEnv.env_vars.LIBTPU_INIT_ARGS replaces the workers' flags (Ray sets a runtime_env variable "
            "over the node's): write it as '${LIBTPU_INIT_ARGS} ...' to add to them, then rerun "
            f"`python -m trainer.fit_check --preset {job.preset} ... --output FILE`"
        )
    env = " ".join(
        f"{name}={value!r}" for name, value in (("LIBTPU_INIT_ARGS", added), ("XLA_FLAGS", flags.xla_flags)) if value
    )
    return (
        f"rerun `{env + ' ' if env else ''}python -m trainer.fit_check --preset {job.preset} --topology {job.topology} "
        f"--slices {job.slices} KEY=VALUE ... --output FILE` with this job's {setting_key(WorkloadSettings.maxtext_overrides)}"
    )


def fit_check_result(job: JobSpec, settings: WorkloadSettings) -> FitResult | None:
    """The fit check of exactly this job's configuration and compiler flags: the file
    `fitCheckResult` names (it must be this configuration's), else this checkout's fit-check
    cache, else None."""
    # What the job compiles with on the TPU workers: theirs, with its runtimeEnv's over them.
    env_vars = settings.runtime_env.get("env_vars") if settings.runtime_env else None
    flags = runtime_flags(job, env_vars if isinstance(env_vars, dict) else None)
    if settings.fit_check_result is None:
        return recorded_result(job, flags)
    path, result_key = PROJECT_ROOT / settings.fit_check_result, setting_key(WorkloadSettings.fit_check_result)
    try:
        result = FitResult.from_json(path.read_text())
    except (OSError, ValueError, TypeError) as error:
        raise JobError(
            [
                f"{result_key} = {settings.fit_check_result!r} cannot be read as a fit check's result ({error}); "
                "write one with `python -m trainer.fit_check --preset PRESET ... --output FILE`, or unset it"
            ]
        ) from None
    expected = configuration(job, flags.libtpu_init_args, flags.xla_flags)
    different = sorted(
        key
        for key in expected.keys() | result.configuration.keys()
        if expected.get(key) != result.configuration.get(key)
    )
    if different:
        raise JobError(
            [
                f"{result_key} = {settings.fit_check_result!r} was compiled for another configuration than this "
                f"job's (they differ in {', '.join(different)}); {_fit_check_command(job, flags)}, or unset "
                f"{result_key}"
            ]
        )
    return result


@dataclass(frozen=True)
class JobPlan:
    """A resolved job as the RayJob is given it: the job, the RayJob's JOB_INPUTS and the
    estimate exported beside them."""

    job: JobSpec
    inputs: dict[str, Any]
    cost: CostEstimate


def plan(
    job: JobSpec,
    settings: WorkloadSettings,
    *,
    price_per_chip_hour: float | None,
    cost_basis: str | None = None,
    checkpoint_bucket: CheckpointBucket | None = None,
    warn: Callable[[str], None],
) -> JobPlan:
    """The RayJob's inputs for a resolved job and its estimate, from the fit check of exactly its
    configuration (read once). `checkpoint_bucket` is the bucket behind a cluster's checkpoint
    mount (None on a local head). Raises JobError for a missing trainer program or a
    fitCheckResult of another configuration; passes a deadline the prediction outlasts to `warn`."""
    inputs = ray_job_inputs(job, settings)
    # Where a GKE run's TensorBoard scalars are uploaded once it has ended.
    inputs["checkpoint_bucket"] = checkpoint_bucket.to_props() if checkpoint_bucket is not None else None
    fit_check = fit_check_result(job, settings) if job.use_tpu else None
    cost, estimate = cost_estimate(
        job, fit_check, assumed_mfu=settings.assumed_mfu, price_per_chip_hour=price_per_chip_hour, cost_basis=cost_basis
    )
    # The run's page and scalars put the measurement beside what was predicted of it.
    inputs["estimate"] = estimate.to_props() if job.use_tpu else None
    warning = deadline_warning(cost, job.total_steps, settings.timeout_seconds)
    if warning is not None:
        warn(warning)
    return JobPlan(job, inputs, cost)


def deadline_warning(estimate: CostEstimate, steps: int | None, timeout_seconds: int) -> str | None:
    """The run the estimate predicts against timeoutSeconds: a job predicted to outlast its
    deadline would be stopped there. The estimate has an error band, so this is a warning."""
    hours, step = estimate.estimated_job_hours, estimate.estimated_step_seconds
    if not hours or not step or not steps:
        return None
    predicted = hours * 3600
    if predicted <= timeout_seconds:
        return None
    if estimate.estimate_source == PREDICTION:
        source = "the fit check's predicted step time"
    else:
        source = f"an assumed MFU of {estimate.assumed_mfu}"
    return (
        f"timeoutSeconds = {timeout_seconds} is shorter than the run this stack predicts: {steps} steps of about "
        f"{step:g} s ({source}) take about {predicted:.0f} s, {predicted - timeout_seconds:.0f} s "
        f"({(predicted / timeout_seconds - 1) * 100:.0f}%) more, so the job would be stopped after about "
        f"{int(timeout_seconds // step)} steps; raise timeoutSeconds to at least {math.ceil(predicted * 1.25)} "
        "(the prediction plus 25%), or lower steps (a warning: the prediction has an error band)"
    )


def cost_estimate(
    job: JobSpec,
    fit_check: FitResult | None,
    *,
    assumed_mfu: float,
    price_per_chip_hour: float | None,
    cost_basis: str | None = None,
) -> tuple[CostEstimate, RunEstimate]:
    """What the job should cost: its steps x an estimated step time, at the chips' hourly price
    (None when the infra stack has none: `cost_basis`, its costBasis output, says why), and the
    same estimate as the RunEstimate the RayJob is given for the run's page.
    The step time is `fit_check`'s prediction (the fit check of this exact configuration, when there
    is one: estimateSource `prediction`), else model FLOPs per step over what the chips deliver at the
    assumed MFU (`assumedMfu`). The FLOPs (and the prediction's MFU) are MaxText's count for the
    configuration (flopsSource `maxtext`; domain/perf/capacity.py names the fallback). None for CPU
    jobs."""
    if not job.use_tpu or job.total_steps is None:
        return CostEstimate(), RunEstimate()
    flops = model_flops(job)
    # A result file recorded with another count is counted again.
    result = counted_by_maxtext(job, fit_check) if fit_check is not None else None
    prediction = result.prediction if result is not None else None
    peak = accelerator_by_ray_type(job.accelerator_type or "").peak_bf16_tflops_per_chip
    estimate = job_cost(
        flops_per_step=flops.per_step,
        steps=job.total_steps,
        chips=flops.chips,
        peak_tflops_per_chip=peak,
        assumed_mfu=assumed_mfu,
        price_per_chip_hour_usd=price_per_chip_hour or 0.0,
        step_seconds=prediction.step_seconds if prediction else None,
    )
    span = prediction.band.step_range(prediction.step_seconds) if prediction and prediction.band else None
    if prediction is None:
        band = f"no fit check of this configuration: the step time assumes an MFU of {assumed_mfu}, with no error band"
    else:
        band = prediction.band.describe(prediction.step_seconds) if prediction.band else "uncalibrated"
    run = RunEstimate(
        source=PREDICTION if prediction else ASSUMED_MFU,
        step_seconds=estimate.step_seconds,
        step_seconds_low=span[0] if span else None,
        step_seconds_high=span[1] if span else None,
        band=band,
        mfu=prediction.mfu if prediction else assumed_mfu,
        peak_tflops_per_chip=peak,
        dollars_per_hour=estimate.dollars_per_hour if price_per_chip_hour is not None else None,
        job_dollars=estimate.job_dollars if price_per_chip_hour is not None else None,
    )
    dollars = None
    if price_per_chip_hour is not None and estimate.step_seconds and flops.tokens_per_step:
        dollars = round(
            price_per_chip_hour * flops.chips * estimate.step_seconds / 3600 / flops.tokens_per_step * 1e6, 4
        )
    start = cold_start_cost(
        chips=flops.chips,
        price_per_chip_hour_usd=price_per_chip_hour,
        compile_seconds=result.full_compile_seconds if result is not None else None,
        compile_basis=_compile_basis(job, result),
    )
    cost = CostEstimate(
        flops_per_step=flops.per_step,
        flops_source=flops.source,
        estimate_source=PREDICTION if prediction else ASSUMED_MFU,
        assumed_mfu=None if prediction else assumed_mfu,
        predicted_mfu=round(prediction.mfu, 4) if prediction else None,
        estimated_step_seconds=round(estimate.step_seconds or 0, 3),
        estimated_job_hours=round(estimate.job_hours or 0, 3),
        estimated_job_dollars=estimate.job_dollars if price_per_chip_hour is not None else None,
        cost_basis=cost_basis,
        cold_start_seconds=start.cold_seconds,
        cold_start_dollars=start.cold_dollars,
        warm_start_seconds=start.warm_seconds,
        warm_start_dollars=start.warm_dollars,
        cold_start_phases=[
            {camel_case(field.name): getattr(phase, field.name) for field in fields(phase)} for phase in start.phases
        ],
        cold_start_basis=start.basis(),
        dollars_per_million_tokens=dollars,
        **multislice_outputs(job, prediction, dollars),
    )
    return cost, run


def multislice_outputs(job: JobSpec, prediction: Prediction | None, dollars: float | None) -> dict[str, Any]:
    """The CostEstimate fields of a job across slices (`dollars`: its dollars per million tokens):
    none on one slice; on several, the prediction's MultisliceCost, or why there is none."""
    if job.slices < 2:
        return {}
    cost = prediction.multislice if prediction is not None else None
    if cost is None:
        why = (
            "no fit check of this configuration: the DCN term is read from its compile"
            if prediction is None
            else "no DCN term for this TPU generation"
        )
        return {"multislice_band": why}
    if cost.not_known is not None:
        return {"multislice_band": cost.not_known}
    # A chip's tokens per step do not change with the slice count: its dollars per token follow its step.
    next_dollars = round(dollars * cost.next_step_seconds / cost.step_seconds, 4) if dollars is not None else None
    return {
        "dcn_share": round(cost.share, 4),
        "multislice_slowdown_percent": round(cost.slowdown_percent, 2),
        "multislice_band": cost.band.describe(),
        "next_slice_step_seconds": round(cost.next_step_seconds, 3),
        "next_slice_dollars_per_million_tokens": next_dollars,
    }


def _compile_basis(job: JobSpec, result: FitResult | None) -> str:
    """Where the compile phase's figure comes from, or why there is none."""
    if result is not None and result.full_compile_seconds is not None:
        return (
            f"{result.full_compile_seconds:g} s: the fit check's whole compile of this configuration, measured on "
            "the machine that ran it (a TPU host's CPUs may compile faster)"
        )
    stopped = (
        f"the fit check of this configuration stopped at buffer assignment after {result.compile_seconds:g} s"
        if result is not None and result.compile_seconds is not None
        else "no fit check of this configuration measured its compile"
    )
    return (
        f"{stopped}; run `python -m trainer.fit_check --preset {job.preset} --topology {job.topology} --slices "
        f"{job.slices} KEY=VALUE ... --full-compile` to measure the whole compile"
    )
