"""The training job (`pulumi-python:dynamic/ray:RayJob`) the workloads stack submits.

Its `entrypoint` is `python -m trainer.<module> --job '<JSON>'`, the resolved job of
domain/training/job.py: the rules read the job from there, exactly as the trainer will. Entry points of
any other form are not this project's jobs and are left alone. All of these are caught before
submission, while the slices are still idle rather than after a compile failure on them.

Spot and failures. An elastic job exists to survive preemptions (Spot slices) and worker failures:
after each one it resumes from its last checkpoint, so every step since that checkpoint is paid
for twice. The rule chosen here bounds that loss per failure: at most 10% of the run's steps
(`checkpoint_period <= max(1, steps // 10)`, with checkpointing on). It is per failure because
the failure count has no fixed bound (Ray Train does not count Spot preemptions against
`maxFailures`); with `maxFailures` worker errors the worst case is that many times 10%.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
)

from domain.perf.capacity import MemoryEstimate, estimate_memory, job_cost
from domain.perf.fit_results import NOT_COMPILED, FitResult, runtime_flags
from domain.perf.maxtext_check import model_flops, recorded_result
from domain.perf.published_recipes import model_family
from domain.ray.compiler_flags import CompilerFlags
from domain.ray.resource_types import RAY_JOB
from domain.setting import settings_of
from domain.tpu.tpu_catalog import Accelerator, SliceShape, accelerator_by_ray_type
from domain.training.job import JobSpec
from domain.training.maxtext_config import base_config, override_problems
from domain.training.presets import PRESETS, maxtext_overrides
from domain.workload_settings import WorkloadSettings
from policies.rules.common import UNKNOWN, at, known, on, plain, whole_number
from policies.rules.declare import ConfigKey, Rules

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()

# docs/capacity.md: the estimate is off by up to ~4 GiB (13% of a v6e chip's usable HBM) either
# way on the compiles it is fitted to, so only a clear excess blocks; near the limit the ahead-of-time fit check decides.
CLEARLY_OVER = 1.25
NEAR_LIMIT = 0.85
# The estimate's working-set constants were fitted to Llama 3 compiles only (docs/capacity.md,
# "The analytic estimate and its error"); on other architectures its error is not measured and can
# exceed the margin above, so there it only advises, never blocks. The family is the model name
# without its size (domain/published_recipes.model_family).
ESTIMATE_FITTED_ON = frozenset({"llama3"})
REDO_BUDGET = 0.10  # of the run's steps, per failure
MIN_SHARE_OF_PRESET_MFU = ConfigKey[float](
    "minShareOfPresetMfu",
    "number",
    minimum=0,
    maximum=1,
    default=0.8,
    description="Flag a job whose predicted MFU is below this share of its preset's predicted MFU.",
)
BUDGET_DOLLARS = ConfigKey[float](
    "budgetDollars",
    "number",
    minimum=0,
    default=1000,
    description="The most one training job may be predicted to cost, in US dollars at list prices.",
)
# The workloads stack's default assumedMfu: the estimate when the fit check has not run.
DEFAULT_ASSUMED_MFU = next(s.default for s in settings_of(WorkloadSettings) if s.field == "assumed_mfu")


def job_of(props: dict[str, Any]) -> JobSpec | None:
    """The resolved job in a trainer entry point, or None for anything else (or not known)."""
    entrypoint = at(props, "entrypoint")
    if not isinstance(entrypoint, str):
        return None
    try:
        words = shlex.split(entrypoint)
        if words[1:2] != ["-m"] or not words[2].startswith("trainer.") or words[3] != "--job":
            return None
        job = JobSpec.from_json(words[4])
    except (IndexError, TypeError, ValueError):
        return None
    # Hand-written JSON can have any shape; the rules need these types to compare and look up.
    numbers_ok = all(isinstance(n, int) for n in (job.slices, job.min_slices, job.max_failures, job.max_preemptions))
    return job if numbers_ok and isinstance(job.maxtext_overrides, dict) else None


def _job(args: ResourceValidationArgs) -> tuple[JobSpec, str] | None:
    if args.resource_type != RAY_JOB:
        return None
    job = job_of(plain(args.props))
    if job is None:
        return None
    return job, f"RayJob '{args.name}' (run {job.run_name!r}, preset {job.preset})"


def _tpu(job: JobSpec) -> tuple[Accelerator, SliceShape] | None:
    if not job.use_tpu or job.accelerator_type is None or job.topology is None:
        return None
    try:
        accelerator = accelerator_by_ray_type(job.accelerator_type)
    except ValueError:
        return None
    shape = accelerator.shapes.get(job.topology)
    return (accelerator, shape) if shape is not None else None


def _slice_counts(job: JobSpec) -> list[int]:
    """An elastic job runs on any slice count from min_slices up; check both ends."""
    return sorted({job.min_slices, job.slices} if job.elastic else {job.slices})


def _mesh_problems(job: JobSpec, shape: SliceShape | None) -> list[str]:
    chips = shape.chips if shape is not None else None
    problems: list[str] = []
    for slices in _slice_counts(job):
        for problem in override_problems(job.maxtext_overrides, chips_per_slice=chips, slices=slices):
            if problem not in problems:
                problems.append(problem)
    return problems


@RULES.resource(
    "rayjob-maxtext-mesh",
    EnforcementLevel.MANDATORY,
    "MaxText overrides are valid and their parallelism multiplies to the chips per slice and the slice count.",
)
@on(_job)
def maxtext_mesh(job: JobSpec, label: str, args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """MaxText refuses a mesh that does not multiply to the devices, after the slices are up."""
    tpu = _tpu(job)
    if job.use_tpu and tpu is None:
        return
    shape = tpu[1] if tpu else None
    problems = _mesh_problems(job, shape)
    if problems:
        where = f"{' or '.join(map(str, _slice_counts(job)))} slice(s) of {shape.chips} chips" if shape else "CPU"
        report_violation(
            f"{label} cannot start on {where}: {'; '.join(problems)}. Fix maxtextOverrides in "
            "the workloads stack: the ici_*_parallelism values must multiply to the chips of "
            "one slice and the dcn_*_parallelism values to the slice count (one of them may "
            "be -1).",
            args.urn,
        )


def _sized(args: ResourceValidationArgs) -> tuple[JobSpec, str, MemoryEstimate, Accelerator] | None:
    """The job with its per-chip estimate on the fewest slices it may run on (the most state
    per chip); None for CPU jobs, meshes MaxText would refuse anyway, or configurations the
    estimate does not model."""
    found = _job(args)
    tpu = _tpu(found[0]) if found else None
    if found is None or tpu is None or _mesh_problems(found[0], tpu[1]):
        return None
    (job, label), (accelerator, shape) = found, tpu
    if _compiler_says_it_fits(job, args):
        return None  # the estimate is for when the compiler has not spoken
    try:
        memory = estimate_memory(job.maxtext_overrides, chips_per_slice=shape.chips, slices=_slice_counts(job)[0])
    except (KeyError, ValueError):
        return None
    return job, label, memory, accelerator


def _runs_with(job: JobSpec, args: ResourceValidationArgs) -> CompilerFlags | None:
    """The compiler flags the job runs with: the workers', with the job's `runtime_env` env_vars
    over them. None while its env_vars are not known."""
    runtime_env = plain(args.props).get("runtime_env")
    env_vars = runtime_env.get("env_vars") if isinstance(runtime_env, dict) else runtime_env
    if env_vars is UNKNOWN or (env_vars is not None and not isinstance(env_vars, dict)):
        return None
    return runtime_flags(job, env_vars)


def _compiled_as_it_runs(job: JobSpec, args: ResourceValidationArgs) -> FitResult | None:
    """This checkout's fit check of exactly the job's configuration, compiled with the flags the
    job runs with (one compiled with other flags is another executable); None without one."""
    flags = _runs_with(job, args)
    return recorded_result(job, flags) if flags is not None else None


def _compiler_says_it_fits(job: JobSpec, args: ResourceValidationArgs) -> bool:
    """Whether the fit check has compiled exactly this job and it fits: a fit check in this
    checkout's cache, or the preset's own configuration with the workers' own flags, whose
    compile the preset records (`compiled_gib`, checked by a `fitcheck` test)."""
    flags = _runs_with(job, args)
    if flags is None:
        return False
    recorded = recorded_result(job, flags)
    if recorded is not None:
        return recorded.fits
    preset = PRESETS.get(job.preset)
    return (
        preset is not None
        and flags == runtime_flags(job)
        and preset.compiled_gib is not None
        and (job.topology, job.slices, job.min_slices) == (preset.topology, preset.slices, preset.slices)
        and _compiled(job.maxtext_overrides) == _compiled(maxtext_overrides(preset, preset.slices))
    )


def _compiled(overrides: Mapping[str, Any]) -> dict[str, str]:
    """The settings that shape the compiled step (not the run's name, length or checkpoints)."""
    return {key: str(value) for key, value in overrides.items() if key not in NOT_COMPILED}


def _estimate_is_fitted_for(job: JobSpec) -> bool:
    model = str({**base_config(), **job.maxtext_overrides}.get("model_name", ""))
    return model_family(model) in ESTIMATE_FITTED_ON


@RULES.resource(
    "rayjob-fits-hbm",
    EnforcementLevel.MANDATORY,
    f"The job's estimated memory per chip is not clearly over usable HBM (at most {CLEARLY_OVER:.0%} of it).",
)
def fits_hbm(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """A job clearly too big for the chips fails to compile after every slice is paid for."""
    sized = _sized(args)
    if sized is None:
        return
    job, label, memory, accelerator = sized
    usable = accelerator.usable_hbm_gib
    if memory.total_gib > CLEARLY_OVER * usable and _estimate_is_fitted_for(job):
        report_violation(
            f"{label} needs about {memory.total_gib:.1f} GiB per chip by the capacity estimate, "
            f"{memory.total_gib / usable:.0%} of the {usable} GiB a TPU {accelerator.name} chip "
            "can use, far beyond the estimate's error of about 5 GiB: it cannot fit. Use "
            "weight_dtype=bfloat16, offload remat (remat_policy=custom, "
            "decoder_layer_input=offload), shard more (ici/dcn fsdp parallelism), lower "
            "per_device_batch_size or add slices; then confirm with "
            f"`python -m trainer.fit_check --preset {job.preset} KEY=VALUE ...`.",
            args.urn,
        )


@RULES.resource(
    "rayjob-hbm-headroom",
    EnforcementLevel.ADVISORY,
    f"The job's estimated memory per chip leaves at least {1 - NEAR_LIMIT:.0%} of usable HBM free.",
)
def hbm_headroom(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Within the estimate's error of the limit, only the compiler can say whether it fits."""
    sized = _sized(args)
    if sized is None:
        return
    job, label, memory, accelerator = sized
    usable = accelerator.usable_hbm_gib
    ceiling = CLEARLY_OVER * usable if _estimate_is_fitted_for(job) else float("inf")
    if NEAR_LIMIT * usable < memory.total_gib <= ceiling:
        report_violation(
            f"{label} needs about {memory.total_gib:.1f} GiB per chip by the capacity estimate, "
            f"{memory.total_gib / usable:.0%} of the {usable} GiB a TPU {accelerator.name} chip "
            "can use: too close to the limit for the estimate (off by up to about 5 GiB) to "
            f"tell whether it fits. Run `python -m trainer.fit_check --preset {job.preset} "
            "KEY=VALUE ...` before provisioning the slices, or leave more headroom.",
            args.urn,
        )


@RULES.resource(
    "rayjob-predicted-mfu",
    EnforcementLevel.ADVISORY,
    f"A job's predicted MFU (fit check) is at least {MIN_SHARE_OF_PRESET_MFU} of its preset's.",
    config=[MIN_SHARE_OF_PRESET_MFU],
)
@on(_job)
def predicted_mfu(job: JobSpec, label: str, args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """A layout much slower than its preset's pays for the difference in TPU hours. Reads the
    fit check this checkout has for exactly the job's configuration; without one it says nothing."""
    preset = PRESETS.get(job.preset)
    result = _compiled_as_it_runs(job, args) if _tpu(job) is not None else None
    prediction = result.prediction if result is not None else None
    if preset is None or preset.predicted_mfu is None or prediction is None:
        return
    share = MIN_SHARE_OF_PRESET_MFU.value(args)
    if prediction.mfu < share * preset.predicted_mfu:
        report_violation(
            f"{label} is predicted to run at {prediction.mfu:.1%} MFU ({prediction.step_seconds:.2f} s per step), "
            f"below {share:.0%} of the {preset.predicted_mfu:.1%} predicted for preset {preset.name}: the same "
            "tokens would cost more TPU hours. Compare layouts with `python -m trainer.fit_check --preset "
            f"{preset.name} KEY=VALUE ...` (docs/capacity.md lists the preset's), or lower "
            f"{MIN_SHARE_OF_PRESET_MFU} in the policy config for {predicted_mfu.name}.",
            args.urn,
        )


@RULES.resource(
    "rayjob-predicted-cost",
    EnforcementLevel.ADVISORY,
    f"A job is predicted to cost at most {BUDGET_DOLLARS} at list prices.",
    config=[BUDGET_DOLLARS],
)
@on(_job)
def predicted_cost(job: JobSpec, label: str, args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """What the whole run should cost: steps x the fit check's predicted step time for exactly
    this configuration, or, without one, the model's FLOPs at the default assumed MFU: MaxText's
    count, or where MaxText cannot be asked (no trainer environment) the Llama formula, which the
    message then names."""
    tpu = _tpu(job)
    steps = job.total_steps
    if tpu is None or steps is None:
        return
    accelerator, shape = tpu
    chips = shape.chips * max(_slice_counts(job))
    result = _compiled_as_it_runs(job, args)
    prediction = result.prediction if result is not None else None
    flops = None if prediction else model_flops(job)  # only the assumed MFU needs them
    estimate = job_cost(
        flops_per_step=flops.per_step if flops else 0.0,
        steps=steps,
        chips=chips,
        peak_tflops_per_chip=accelerator.peak_bf16_tflops_per_chip,
        assumed_mfu=DEFAULT_ASSUMED_MFU,
        price_per_chip_hour_usd=accelerator.price_per_chip_hour_usd,
        step_seconds=prediction.step_seconds if prediction else None,
    )
    budget = BUDGET_DOLLARS.value(args)
    if estimate.job_dollars is not None and estimate.job_dollars > budget:
        source = (
            f"an assumed {DEFAULT_ASSUMED_MFU:.0%} MFU of the model FLOPs of {flops.described} "
            "(no fit check of this configuration here)"
            if flops
            else "the fit check's predicted step time"
        )
        report_violation(
            f"{label} is predicted to cost about ${estimate.job_dollars:,.2f} ({steps} steps of "
            f"{estimate.step_seconds:.2f} s on {chips} chips at ${accelerator.price_per_chip_hour_usd:.2f} per chip-hour, "
            f"from {source}), over the budget of ${budget:,.2f}. Run fewer steps, or raise {BUDGET_DOLLARS} in the "
            f"policy config for {predicted_cost.name}.",
            args.urn,
        )


@RULES.resource(
    "rayjob-elastic-checkpointing",
    EnforcementLevel.ADVISORY,
    f"Elastic jobs checkpoint often enough that a failure repeats at most {REDO_BUDGET:.0%} of the steps.",
)
def elastic_checkpointing(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Each preemption or failure repeats the steps since the last checkpoint (module docs)."""
    found = _job(args)
    if found is None or not found[0].elastic:
        return
    job, label = found
    values = {**base_config(), **job.maxtext_overrides}
    steps, period = whole_number(values.get("steps")), whole_number(values.get("checkpoint_period"))
    enabled = str(values.get("enable_checkpointing")).lower() == "true"
    if not known(steps) or steps < 1 or (enabled and not known(period)):
        return
    allowed = max(1, int(steps * REDO_BUDGET))
    checkpoints = enabled and period > 0
    redo = min(period, steps) if checkpoints else steps
    if redo <= allowed:
        return
    cause = f"checkpoints every {period} steps" if checkpoints else "does not checkpoint"
    fix = (
        f"checkpoint_period: {allowed}"
        if checkpoints
        else (f"enable_checkpointing: true, checkpoint_period: {allowed}")
    )
    report_violation(
        f"{label} is elastic (its slices may be preempted or fail) but {cause} of {steps}: each "
        f"failure repeats up to {redo} steps ({redo / steps:.0%} of the run; maxFailures "
        f"{job.max_failures} allows that many worker errors, "
        f"{'preemptions without limit' if job.max_preemptions < 0 else f'maxPreemptions {job.max_preemptions} that many preemptions'}). "
        f"Set maxtextOverrides {{{fix}}} (or a shorter period), so a failure repeats at most "
        f"{REDO_BUDGET:.0%} of the steps.",
        args.urn,
    )
