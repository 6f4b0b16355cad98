"""What a fit check answers, as data every part of the product reads: the result record (its
report, its prediction, its JSON), the configuration it is recorded under and its cache key, and
the flags a compile runs with. The fit check itself (trainer/fit_check.py) compiles and writes
results; the workloads stack and the policies only read them, so they depend on this module and
never on the trainer's command line.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from domain.paths import FIT_CHECK_CACHE, TRAINER_LOCK
from domain.perf.capacity import FLOPS_SOURCES
from domain.perf.dcn import dcn_axis
from domain.perf.hlo_profile import StepProfile
from domain.perf.published_recipes import model_family
from domain.perf.speed_anchors import speed_model
from domain.perf.step_time import Prediction
from domain.ray.compiler_flags import CompilerFlags, job_flags, worker_flags
from domain.tpu.tpu_catalog import accelerator_by_ray_type
from domain.training.job import JobSpec, resolve_job

# Results by cache key; tests point it elsewhere (read when used, never copied at import).
CACHE_DIR = FIT_CHECK_CACHE

# Tensors MaxText's custom remat policy saves in HBM (`device`), moves to host memory (`offload`)
# or recomputes (`remat`); an out-of-memory report names the ones kept, as a way to fit.
REMAT_TENSORS_KEPT = ("device", "offload")

# MaxText settings that do not change the compiled training step: where and what it is called,
# how long it runs, when it saves. Left out of the configuration a result is recorded under, so a
# workloads job finds the fit check of its preset whatever its run name or step count.
NOT_COMPILED = frozenset(
    {
        "run_name",
        "base_output_directory",
        "steps",
        "checkpoint_period",
        "enable_checkpointing",
        "async_checkpointing",
        "enable_autocheckpoint",
    }
)

# Bumped when what a result holds changes shape (the profile's fields): older cached results
# and result files are then another configuration, not misread.
RESULT_FORMAT = 4  # 3: a refusal carries the sizes of what did not fit; 4: the profile counts transfers across slices
BUFFER_ASSIGNMENT = "buffer assignment"
CODE_GENERATION = "code generation"


@dataclass(frozen=True)
class FitResult:
    fits: bool
    slice_type: str
    slices: int
    chips: int
    usable_gib: float
    argument_gib: float | None = None
    temp_gib: float | None = None
    output_gib: float | None = None
    alias_gib: float | None = None
    total_gib: float | None = None
    flops_per_step: float | None = None
    message: str | None = None
    # How far the compile ran: BUFFER_ASSIGNMENT (the default, stopped there) or CODE_GENERATION.
    compiled_through: str | None = None
    # For the prediction: the accelerator generation, what one chip processes and computes per
    # step (tokens; the model's FLOPs, for MFU), and the compiled step's profile.
    generation: str | None = None
    tokens_per_chip: float | None = None
    model_flops_per_chip: float | None = None
    model_flops_source: str | None = None  # domain/perf/capacity.py: MAXTEXT_FLOPS, or the fallback's
    profile: dict[str, Any] | None = None
    unreadable_step: str | None = None  # why the optimized step could not be read, if it could not
    # Seconds XLA spent compiling the train step here (from its first dump to the end of the
    # compile, or to buffer assignment: see compiled_through); None in results recorded before.
    compile_seconds: float | None = None
    # What the result was compiled for (configuration()): the workloads stack matches on it.
    configuration: dict[str, Any] = field(default_factory=dict)

    @property
    def prediction(self) -> Prediction | None:
        """The predicted step, from the profile and the generation's current calibration (so a
        cached compile is re-read, not recompiled, when the calibration changes)."""
        model = speed_model(self.generation or "")
        if model is None or self.profile is None or not self.tokens_per_chip or not self.model_flops_per_chip:
            return None
        settings = self.configuration.get("maxtext", {})
        slices = int(self.configuration.get("slices", 1))
        step = StepProfile.from_json(self.profile)
        return model.predict(
            step,
            tokens_per_chip=self.tokens_per_chip,
            model_flops_per_chip=self.model_flops_per_chip,
            family=model_family(settings.get("model_name", "")),
            slices=slices,
            dcn_axis=dcn_axis(settings, slices),
        )

    @property
    def missing_prediction(self) -> str | None:
        """Why there is no predicted step (None when there is one): the report and the fit
        check's page say it in the same words."""
        if self.prediction is not None:
            return None
        if not self.fits:
            return "the step does not fit, so there is no step to time"
        if speed_model(self.generation or "") is None:
            return f"no calibrated speed model for TPU {self.generation}"
        if self.unreadable_step:
            return f"the optimized step could not be read: {self.unreadable_step}"
        return "the compiler dumped no optimized HLO to read"

    @property
    def full_compile_seconds(self) -> float | None:
        """How long the whole compile of the train step took here, when this result ran it to the
        end (a compile stopped at buffer assignment says nothing of the code generation after it)."""
        return self.compile_seconds if self.compiled_through == CODE_GENERATION else None

    @property
    def headroom_percent(self) -> float | None:
        if self.total_gib is None:
            return None
        return 100 * (self.usable_gib - self.total_gib) / self.usable_gib

    def to_json(self) -> str:
        """The result, with its prediction spelled out for readers (it is derived again on load)."""
        prediction = self.prediction
        data = {**asdict(self), "prediction": asdict(prediction) if prediction else None}
        return json.dumps(data, sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> FitResult:
        data = json.loads(text)
        data.pop("prediction", None)
        return cls(**data)

    def report(self) -> str:
        lines = [f"fit check: {self.slices} x {self.slice_type} ({self.chips} chips)"]
        if self.total_gib is not None:
            lines += [
                f"per chip: arguments {self.argument_gib:.2f} GiB, temporaries {self.temp_gib:.2f} GiB, "
                f"output {self.output_gib:.2f} GiB, aliased {self.alias_gib:.2f} GiB",
                f"per chip total: {self.total_gib:.2f} GiB of {self.usable_gib:.2f} GiB usable HBM",
                f"headroom: {self.headroom_percent:.1f}%",
            ]
        if not self.fits and self.total_gib is not None:
            over = self.total_gib - self.usable_gib
            lines.append(
                f"over the limit by {over:.2f} GiB per chip ({100 * over / self.usable_gib:.1f}% of usable HBM); "
                "to fit, try one of (then check again):"
            )
            lines += [f"  - {way}" for way in ways_to_fit(self.configuration.get("maxtext", {}))]
        elif self.fits and self.total_gib is not None and self.total_gib > self.usable_gib:
            lines.append(
                f"the compiler placed every buffer in {self.total_gib:.2f} GiB, above the {self.usable_gib:.2f} GiB "
                f"the catalog gives a TPU {self.slice_type.split('-')[0]} chip: its limit is higher with this libtpu"
            )
        if self.flops_per_step is not None:
            # XLA's cost analysis counts a scanned loop's body once, so with MaxText's scanned
            # decoder layers this is far below the model's FLOPs; shown as the compiler says it.
            lines.append(f"FLOPs per step per chip (compiler's cost analysis): {self.flops_per_step:.4g}")
        if self.message:
            lines.append(f"compiler: {self.message}")
        if self.compiled_through == BUFFER_ASSIGNMENT:
            lines.append("compiled through buffer assignment (code generation skipped: --full-compile runs it)")
        if self.compile_seconds is not None:
            stage = "the whole compile" if self.full_compile_seconds is not None else "to buffer assignment"
            lines.append(f"compiler time on this machine: {self.compile_seconds:.0f} s ({stage})")
        if self.fits:
            prediction = self.prediction
            if prediction is not None:
                lines += prediction.lines()
                source = FLOPS_SOURCES.get(self.model_flops_source or "", "a count this result does not name")
                lines.append(f"(MFU and tokens/s from the model FLOPs and tokens of {source})")
                lines.append("(a compiler-model estimate, not a TPU measurement: docs/capacity.md gives its error)")
            else:
                lines.append(f"predicted step time: none ({self.missing_prediction})")
        lines.append("result: FITS" if self.fits else "result: DOES NOT FIT")
        return "\n".join(lines)


def configuration(job: JobSpec, flags: str, xla_flags: str = "") -> dict[str, Any]:
    """What a result is recorded under: the compile target, the MaxText settings that shape the
    step, the compiler's flags (libtpu's; XLA's only when there are any, so results recorded
    before they were keyed keep their keys), and the versions (the trainer lock pins MaxText,
    JAX and libtpu)."""
    acc = accelerator_by_ray_type(job.accelerator_type or "")
    lock = TRAINER_LOCK.read_text() if TRAINER_LOCK.exists() else ""
    recorded: dict[str, Any] = {
        "result_format": RESULT_FORMAT,
        "slice_type": acc.slice_type(job.topology or ""),
        "slices": job.slices,
        "maxtext": {k: str(v) for k, v in sorted(job.maxtext_overrides.items()) if k not in NOT_COMPILED},
        "libtpu_init_args": flags,
        "maxtext_version": importlib.metadata.version("maxtext"),
        "trainer_lock_sha256": hashlib.sha256(lock.encode()).hexdigest(),
    }
    if xla_flags:
        recorded["xla_flags"] = xla_flags
    return recorded


def libtpu_flags(job: JobSpec, extra: str = "") -> str:
    """What the compile runs with: exactly the TPU workers' LIBTPU_INIT_ARGS (declared once,
    domain/ray/compiler_flags.py, which the RayCluster's workers get too), then any extra flags
    the caller asks for."""
    runtime = worker_flags(accelerator_by_ray_type(job.accelerator_type or "")).libtpu_init_args
    return " ".join(part for part in (runtime, extra.strip()) if part)


def runtime_flags(job: JobSpec, env_vars: Mapping[str, Any] | None = None) -> CompilerFlags:
    """What the job's processes compile with on the TPU workers: the workers' flags with the job's
    runtimeEnv env_vars applied over them, as Ray applies them (domain/ray/compiler_flags.py)."""
    return job_flags(accelerator_by_ray_type(job.accelerator_type or ""), env_vars)


def ways_to_fit(maxtext: dict[str, str]) -> list[str]:
    """Settings that lower a step's HBM, named with the job's current values (each needs a fit
    check of its own: the compiler decides)."""
    ways = []
    batch = maxtext.get("per_device_batch_size")
    if batch and float(batch) > 1:
        ways.append(f"a smaller per_device_batch_size (now {batch}; activations scale with it)")
    policy = maxtext.get("remat_policy")
    kept = sorted(key for key, value in maxtext.items() if value in REMAT_TENSORS_KEPT and key != "decoder_layer_input")
    if policy == "custom" and kept:
        ways.append(f"recompute instead of keeping: {', '.join(f'{key}=remat' for key in kept)}")
    elif policy not in ("full", "custom"):
        ways.append(f"remat_policy=full or custom with offloaded tensors (now {policy or 'the base default'})")
    if maxtext.get("weight_dtype", "float32") == "float32":
        ways.append("weight_dtype=bfloat16 (halves the weights and optimizer state)")
    ways.append("more chips to shard the state over (a larger topology, or dcn_fsdp_parallelism across slices)")
    return ways


def cache_key(job: JobSpec, flags: str, xla_flags: str = "") -> str:
    return hashlib.sha256(json.dumps(configuration(job, flags, xla_flags), sort_keys=True).encode()).hexdigest()[:24]


# What a fit check resolves a job with: the compile's run name and output directory do not shape
# the step (NOT_COMPILED), so every fit check uses these.
FIT_CHECK_RUN_NAME = "fit-check"
FIT_CHECK_ROOT = "/tmp/fit-check"


def fit_check_job(
    preset: str,
    *,
    slices: int | None = None,
    topology: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> JobSpec:
    """The job a fit check compiles: the preset on `slices` x `topology` (the preset's own when
    None) with `overrides`, refused like any job (JobError) when they are not valid."""
    return resolve_job(
        preset,
        run_name=FIT_CHECK_RUN_NAME,
        checkpoint_root=FIT_CHECK_ROOT,
        slices=slices,
        topology=topology,
        overrides=overrides,
    )


def result_path(job: JobSpec, flags: str, xla_flags: str = "") -> Path:
    """Where the fit check of `job` with `flags` (and `xla_flags`) is cached (CACHE_DIR, read when
    called)."""
    return CACHE_DIR / f"{cache_key(job, flags, xla_flags)}.json"


def cached_result(job: JobSpec, flags: CompilerFlags | None = None) -> FitResult | None:
    """The cached fit check of exactly this configuration (with the workers' flags unless told
    otherwise) as it was recorded, or None when it has not been run here."""
    flags = flags or runtime_flags(job)
    cached = result_path(job, flags.libtpu_init_args, flags.xla_flags)
    return FitResult.from_json(cached.read_text()) if cached.exists() else None
