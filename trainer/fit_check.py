"""Will this job fit in TPU memory? Asks MaxText's ahead-of-time compiler, on this machine's CPU,
before a single TPU is provisioned.

    python -m trainer.fit_check --preset llama3-70b [--topology T] [--slices N] [key=value ...]

Compiles the training step for the preset's TPU topology and slice count with MaxText's
`train_compile` (libtpu from `maxtext[tpu]` runs the TPU compiler without a TPU), with exactly the
LIBTPU_INIT_ARGS the TPU workers get (plus any flags in the caller's LIBTPU_INIT_ARGS), then prints
per-chip memory (arguments, temporaries, total), usable HBM, headroom and FLOPs per step. Exit
status: 0 fits, 1 does not fit (with the compiler's message), 2 any other error (with the
compiler's own error when it gave one). Results are cached by the full resolved configuration,
the flags and the trainer lock (MaxText, JAX, libtpu) under .cache/.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from domain.capacity import train_flops_per_step
from domain.job import JobError, JobSpec, resolve_job
from domain.maxtext_config import base_config_path
from domain.paths import PROJECT_ROOT
from domain.presets import PRESETS
from domain.tpu_catalog import accelerator_by_ray_type

CACHE_DIR = PROJECT_ROOT / ".cache" / "fit-check"
TRAINER_PYTHON = PROJECT_ROOT / ".venv-trainer" / "bin" / "python"
GIB = 1024**3

MEMORY_LINE = re.compile(r"Memory analysis: CompiledMemoryStats\((?P<fields>[^)]*)\)")
FLOPS_FIELD = re.compile(r"""['"]flops['"]:\s*(?P<flops>[-\d.e+]+)""")
OOM_LINE = re.compile(r".*(CompileTimeHbmOom|RESOURCE_EXHAUSTED|Ran out of memory).*")
# The compiler's own words when it stops for another reason: a flag libtpu does not know, a
# runtime error from XLA (a flag it refuses on this platform, a bad mesh), or a Python exception.
COMPILER_ERRORS = (
    re.compile(r"ERROR: (Unknown command line flag .*)"),
    re.compile(r"jax\.errors\.JaxRuntimeError: (.*)"),
    re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception): .*)", re.MULTILINE),
)
# LIBTPU_INIT_ARGS in the caller's environment: XLA flags to try on top of the runtime ones, as
# MaxText's recipes pass them (a later flag overrides an earlier one).
EXTRA_FLAGS_VARIABLE = "LIBTPU_INIT_ARGS"


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

    @property
    def headroom_percent(self) -> float | None:
        if self.total_gib is None:
            return None
        return 100 * (self.usable_gib - self.total_gib) / self.usable_gib

    def report(self) -> str:
        lines = [f"fit check: {self.slices} x {self.slice_type} ({self.chips} chips)"]
        if self.total_gib is not None:
            lines += [
                f"per chip: arguments {self.argument_gib:.2f} GiB, temporaries {self.temp_gib:.2f} GiB, "
                f"output {self.output_gib:.2f} GiB, aliased {self.alias_gib:.2f} GiB",
                f"per chip total: {self.total_gib:.2f} GiB of {self.usable_gib:.2f} GiB usable HBM",
                f"headroom: {self.headroom_percent:.1f}%",
            ]
        if self.flops_per_step is not None:
            # XLA's cost analysis counts a scanned loop's body once, so with MaxText's scanned
            # decoder layers this is far below the model's FLOPs; shown as the compiler says it.
            lines.append(f"FLOPs per step per chip (compiler's cost analysis): {self.flops_per_step:.4g}")
        if self.message:
            lines.append(f"compiler: {self.message}")
        lines.append("result: FITS" if self.fits else "result: DOES NOT FIT")
        return "\n".join(lines)


def compile_command(job: JobSpec, python: Path) -> list[str]:
    """MaxText's AOT compile for the job's TPU shape: its overrides plus the compile target."""
    acc = accelerator_by_ray_type(job.accelerator_type or "")
    return [
        str(python),
        "-m",
        "maxtext.trainers.pre_train.train_compile",
        str(base_config_path()),
        *job.maxtext_args(),
        f"compile_topology={acc.slice_type(job.topology or '')}",
        f"compile_topology_num_slices={job.slices}",
        # No JAX persistent compilation cache (MaxText's default is ~/jax_cache): its key leaves
        # LIBTPU_INIT_ARGS out, so an executable compiled under other flags could be reused and
        # hide a flag libtpu refuses. The fit check caches its results by config and flags.
        "jax_cache_dir=",
    ]


def libtpu_flags(job: JobSpec, extra: str = "") -> str:
    """What the compile runs with: exactly the TPU workers' LIBTPU_INIT_ARGS (one definition,
    domain/tpu_catalog.py), then any extra flags the caller asks for."""
    runtime = accelerator_by_ray_type(job.accelerator_type or "").libtpu_init_args()
    return " ".join(part for part in (runtime, extra.strip()) if part)


def compiler_error(output: str) -> str | None:
    """The compiler's own error, when it printed one."""
    for pattern in COMPILER_ERRORS:
        found = pattern.findall(output)
        if found:
            return found[-1].strip()[:2000]
    return None


def parse_output(output: str, job: JobSpec) -> FitResult:
    """Reads the compiler's memory and cost analysis, or its out-of-memory error."""
    acc = accelerator_by_ray_type(job.accelerator_type or "")
    shape = acc.shape(job.topology or "")
    common = dict(  # noqa: C408 (keyword form: these are FitResult's arguments)
        slice_type=acc.slice_type(shape.topology),
        slices=job.slices,
        chips=shape.chips * job.slices,
        usable_gib=acc.usable_hbm_gib,
    )
    oom = OOM_LINE.search(output)
    memory = MEMORY_LINE.search(output)
    if memory is None:
        if oom is None:
            error = compiler_error(output)
            if error is None:
                raise RuntimeError("the compiler printed neither a memory analysis nor an error")
            raise RuntimeError(f"the compiler failed: {error}")
        return FitResult(fits=False, message=oom.group(0).strip()[:2000], **common)
    fields = {
        key.strip(): int(value)
        for key, value in (pair.split("=", 1) for pair in memory["fields"].split(",") if "=" in pair)
    }
    argument, temp = fields["argument_size_in_bytes"] / GIB, fields["temp_size_in_bytes"] / GIB
    output_gib, alias = fields["output_size_in_bytes"] / GIB, fields["alias_size_in_bytes"] / GIB
    total = argument + temp + output_gib - alias  # MaxText's own total (max_utils)
    flops = FLOPS_FIELD.search(output)
    return FitResult(
        fits=total <= acc.usable_hbm_gib,
        argument_gib=argument,
        temp_gib=temp,
        output_gib=output_gib,
        alias_gib=alias,
        total_gib=total,
        flops_per_step=float(flops["flops"]) if flops else None,
        **common,
    )


TRAINER_LOCK = PROJECT_ROOT / "requirements-trainer.txt"


def cache_key(command: Sequence[str], flags: str) -> str:
    # The compile runs in the trainer environment: its lock pins MaxText, JAX and libtpu.
    lock = TRAINER_LOCK.read_text() if TRAINER_LOCK.exists() else ""
    versions = {
        "maxtext": importlib.metadata.version("maxtext"),
        "trainer-lock": hashlib.sha256(lock.encode()).hexdigest(),
    }
    # The output directory is a fresh temporary one each time: it does not change the result.
    stable = [part for part in command[1:] if not part.startswith("base_output_directory=")]
    return hashlib.sha256(json.dumps([stable, flags, versions], sort_keys=True).encode()).hexdigest()[:24]


def compile_environment(flags: str) -> dict[str, str]:
    """The compile's environment: the flags, and libtpu's process lock left off. libtpu takes a
    lock file meant to stop two processes from sharing one TPU; an AOT compile has no TPU to
    share, and with the lock a second fit check running at the same time fails."""
    return {**os.environ, "LIBTPU_INIT_ARGS": flags, "ALLOW_MULTIPLE_LIBTPU_LOAD": "true"}


def run_fit_check(
    job: JobSpec, *, use_cache: bool = True, python: Path | None = None, extra_flags: str = ""
) -> FitResult:
    python = python or (TRAINER_PYTHON if TRAINER_PYTHON.exists() else Path(sys.executable))
    command = compile_command(job, python)
    flags = libtpu_flags(job, extra_flags)
    cached = CACHE_DIR / f"{cache_key(command, flags)}.json"
    if use_cache and cached.exists():
        return FitResult(**json.loads(cached.read_text()))
    with tempfile.TemporaryDirectory(prefix="fit-check-") as output_dir:
        command = [
            part if not part.startswith("base_output_directory=") else f"base_output_directory={output_dir}"
            for part in command
        ]
        completed = subprocess.run(
            command, capture_output=True, text=True, cwd=output_dir, env=compile_environment(flags)
        )
    result = parse_output(completed.stdout + completed.stderr, job)
    if result.fits or result.message:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(asdict(result), sort_keys=True))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", required=True, choices=[p for p, v in PRESETS.items() if v.runs_on_tpu])
    parser.add_argument("--topology", help="slice topology, for example 4x8 (default: the preset's)")
    parser.add_argument("--slices", type=int, help="slice count (default: the preset's)")
    parser.add_argument("--no-cache", action="store_true", help="compile even when a result is cached")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="MaxText settings to add or override")
    args = parser.parse_args(argv)
    malformed = [pair for pair in args.overrides if "=" not in pair or pair.startswith("=")]
    if malformed:
        parser.error(f"{', '.join(malformed)}: overrides are KEY=VALUE, for example weight_dtype=bfloat16")
    try:
        overrides = dict(pair.split("=", 1) for pair in args.overrides)
        job = resolve_job(
            args.preset,
            run_name="fit-check",
            checkpoint_root="/tmp/fit-check",
            slices=args.slices,
            topology=args.topology,
            overrides=overrides,
        )
        extra = os.environ.get(EXTRA_FLAGS_VARIABLE, "")
        if extra:
            print(f"fit check: compiling with the workers' flags plus {EXTRA_FLAGS_VARIABLE}: {extra}")
        result = run_fit_check(job, use_cache=not args.no_cache, extra_flags=extra)
    except JobError as error:
        print(f"fit check: {error}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as error:
        print(f"fit check failed: {error}", file=sys.stderr)
        return 2
    print(result.report())
    model_flops = train_flops_per_step(job.maxtext_overrides, chips=result.chips)
    print(f"model FLOPs per step (all chips; 6 x parameters x tokens + attention): {model_flops:.4g}")
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
