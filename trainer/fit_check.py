"""Will this job fit in TPU memory? Asks MaxText's ahead-of-time compiler, on this machine's CPU,
before a single TPU is provisioned.

    python -m trainer.fit_check --preset llama3-70b [--topology T] [--slices N] [key=value ...]

Compiles the training step for the preset's TPU topology and slice count with MaxText's
`train_compile` (libtpu from `maxtext[tpu]` runs the TPU compiler without a TPU), with exactly the
LIBTPU_INIT_ARGS the TPU workers get (plus any flags in the caller's LIBTPU_INIT_ARGS, and the
caller's XLA_FLAGS as a job's runtimeEnv would set them), then prints
per-chip memory (arguments, temporaries, total), usable HBM and headroom. Exit status: 0 fits, 1
does not fit (with the compiler's message), 2 any other error (with the compiler's own error when
it gave one). Results are cached by the full resolved configuration, the flags and the trainer
lock (MaxText, JAX, libtpu) under .cache/.

The compile is stopped once the compiler has assigned every buffer: by then it has optimized and
scheduled the step, and has either run out of HBM or placed every buffer, and it dumps both
(XLA_FLAGS=--xla_dump_to). What follows is libtpu's code generation, about nine tenths of a
full compile's time on 2 cores, which changes neither. `--full-compile` runs it anyway (errors
libtpu raises only while generating code show up then).

From the same compile it predicts the step: domain/perf/hlo_profile.py reads the optimized module's
matmuls, memory traffic, collectives and host transfers, and domain/perf/step_time.py turns them into
seconds, tokens/s per chip and MFU with the generation's calibrated speed model. `--output FILE`
also writes the result as JSON, for the workloads stack's `fitCheckResult` setting; `--report
PATH` writes it as a page to open in a browser (domain/reports/fit_page.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from domain.paths import TRAINER_PYTHON
from domain.perf import fit_results
from domain.perf.fit_results import (
    BUFFER_ASSIGNMENT,
    CODE_GENERATION,
    FitResult,
    configuration,
    fit_check_job,
    libtpu_flags,
)
from domain.perf.hlo_profile import profile
from domain.perf.hlo_text import BufferMemory, HloError, buffer_memory
from domain.perf.maxtext_check import counted_by_maxtext, model_flops
from domain.perf.published_recipes import PublishedRun, compile_spec
from domain.perf.speed_anchors import speed_model
from domain.reports.fit_page import fit_page
from domain.tpu.tpu_catalog import accelerator_by_ray_type
from domain.training.job import JobError, JobSpec
from domain.training.maxtext_config import base_config, base_config_path
from domain.training.presets import PRESETS

GIB = 1024**3

MEMORY_LINE = re.compile(r"Memory analysis: CompiledMemoryStats\((?P<fields>[^)]*)\)")
FLOPS_FIELD = re.compile(r"""['"]flops['"]:\s*(?P<flops>[-\d.e+]+)""")
OOM_LINE = re.compile(r".*(CompileTimeHbmOom|RESOURCE_EXHAUSTED|Ran out of memory).*")
# What the compiler's out-of-memory error says it needed and could use, in GiB: "the total
# memory required for HLO temporaries (32.92G) exceeds available HBM (31.24G)". Its "temporaries"
# are every HBM buffer, arguments included: the buffer assignment it dumps adds up to that figure.
OOM_SIZES = re.compile(r"\((?P<required>[\d.]+)G\) exceeds available HBM \((?P<available>[\d.]+)G\)")
# The compiler's own words when it stops for another reason: a flag libtpu does not know, a
# runtime error from XLA (a flag it refuses on this platform, a bad mesh), or a Python exception.
COMPILER_ERRORS = (
    re.compile(r"ERROR: (Unknown command line flag .*)"),
    re.compile(r"(Unknown flags? in XLA_FLAGS: .*)"),
    re.compile(r"jax\.errors\.JaxRuntimeError: (.*)"),
    re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception): .*)", re.MULTILINE),
)
HLO_MODULE = "jit_train_step"
# The dumps the fit check reads: written by the compiler once buffer assignment has succeeded
# (the last of them only then: after an out-of-memory error it is missing).
OPTIMIZED_SUFFIX = ".after_optimizations.txt"
BUFFERS_SUFFIX = ".after_optimizations-buffer-assignment.txt"
# The first dump of the train step, written as XLA's compile of it starts (after tracing and lowering).
BEFORE_SUFFIX = ".before_optimizations.txt"
PLACED_SUFFIX = ".after_optimizations_after_buffer_assignment.txt"
POLL_SECONDS = 0.2
# LIBTPU_INIT_ARGS in the caller's environment: XLA flags to try on top of the runtime ones, as
# MaxText's recipes pass them (a later flag overrides an earlier one).
EXTRA_FLAGS_VARIABLE = "LIBTPU_INIT_ARGS"
# XLA_FLAGS in the caller's environment: XLA's flags, as a job's runtimeEnv would set them (the
# workers set none); part of the result's key like the libtpu flags.
XLA_FLAGS_VARIABLE = "XLA_FLAGS"


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
        # No JAX persistent compilation cache (MaxText's default is ~/jax_cache): a hit skips the
        # compile, and with it the dumps the fit check reads and any error a flag would raise. The
        # fit check caches its results by configuration and flags instead.
        "jax_cache_dir=",
    ]


def compiler_error(output: str) -> str | None:
    """The compiler's own error, when it printed one."""
    for pattern in COMPILER_ERRORS:
        found = pattern.findall(output)
        if found:
            return found[-1].strip()[:2000]
    return None


def _target(job: JobSpec) -> dict[str, Any]:
    acc = accelerator_by_ray_type(job.accelerator_type or "")
    shape = acc.shape(job.topology or "")
    return {
        "slice_type": acc.slice_type(shape.topology),
        "slices": job.slices,
        "chips": shape.chips * job.slices,
        "usable_gib": acc.usable_hbm_gib,
    }


def memory_result(
    job: JobSpec,
    memory: BufferMemory,
    *,
    flops: float | None = None,
    stage: str | None,
    fits: bool = True,
    usable_gib: float | None = None,
    message: str | None = None,
) -> FitResult:
    """A compile's per-chip HBM (sizes in bytes; the total is MaxText's own, max_utils:
    arguments + temporaries + outputs - aliased). Whether it fits is the compiler's verdict
    (`fits`: it placed every buffer, or it ran out of memory), never a comparison with the
    catalog's usable HBM: that figure is measured on one libtpu (assumed for other generations),
    and a compile the compiler accepts must not be refused for it. `usable_gib` is the compiler's
    own limit when its error states one."""
    target = _target(job)
    if usable_gib is not None:
        target["usable_gib"] = usable_gib
    return FitResult(
        fits=fits,
        message=message,
        argument_gib=memory.argument_bytes / GIB,
        temp_gib=memory.temp_bytes / GIB,
        output_gib=memory.output_bytes / GIB,
        alias_gib=memory.alias_bytes / GIB,
        total_gib=memory.total_bytes / GIB,
        flops_per_step=flops,
        compiled_through=stage,
        **target,
    )


def over_limit(job: JobSpec, refused: FitResult, buffers: Path) -> FitResult:
    """An out-of-memory compile with what it tried to place (the buffer assignment the compiler
    dumps before it raises): the margin to the limit, and what takes the memory."""
    try:
        memory = buffer_memory(buffers.read_text())
    except HloError:
        return refused  # the compiler's own words stand
    return memory_result(
        job,
        memory,
        stage=None,
        fits=False,
        usable_gib=refused.usable_gib,
        message=refused.message,
    )


def parse_output(output: str, job: JobSpec) -> FitResult:
    """Reads a finished compile's memory and cost analysis, or its out-of-memory error."""
    oom = OOM_LINE.search(output)
    memory = MEMORY_LINE.search(output)
    if memory is None:
        if oom is None:
            error = compiler_error(output)
            if error is None:
                raise RuntimeError("the compiler printed neither a memory analysis nor an error")
            raise RuntimeError(f"the compiler failed: {error}")
        target = _target(job)
        sizes = OOM_SIZES.search(oom.group(0))
        if sizes is not None:
            target["usable_gib"] = float(sizes["available"])
        return FitResult(fits=False, message=oom.group(0).strip()[:2000], **target)
    fields = {
        key.strip(): int(value)
        for key, value in (pair.split("=", 1) for pair in memory["fields"].split(",") if "=" in pair)
    }
    flops = FLOPS_FIELD.search(output)
    analysed = BufferMemory(
        argument_bytes=fields["argument_size_in_bytes"],
        output_bytes=fields["output_size_in_bytes"],
        alias_bytes=fields["alias_size_in_bytes"],
        temp_bytes=fields["temp_size_in_bytes"],
    )
    return memory_result(
        job,
        analysed,
        flops=float(flops["flops"]) if flops else None,
        stage=CODE_GENERATION,
    )


def compile_environment(flags: str, dump_dir: Path | None = None, *, xla_flags: str = "") -> dict[str, str]:
    """The compile's environment: the flags (libtpu's, and XLA's exactly as given: the caller's own
    XLA_FLAGS never leak in unkeyed), and libtpu's process lock left off. libtpu takes a lock file
    meant to stop two processes from sharing one TPU; an AOT compile has no TPU to share, and with
    the lock a second fit check running at the same time fails. With `dump_dir`, XLA also writes
    the training step's optimized HLO there (an XLA flag, not a libtpu one: libtpu refuses
    --xla_dump_to in LIBTPU_INIT_ARGS as unknown; dump flags do not change the executable)."""
    environment = {**os.environ, "LIBTPU_INIT_ARGS": flags, "ALLOW_MULTIPLE_LIBTPU_LOAD": "true"}
    environment.pop("XLA_FLAGS", None)
    dump = f"--xla_dump_to={dump_dir} --xla_dump_hlo_module_re={HLO_MODULE}" if dump_dir is not None else ""
    combined = " ".join(part for part in (xla_flags.strip(), dump) if part)
    if combined:
        environment["XLA_FLAGS"] = combined
    return environment


def dumped(dump_dir: Path, suffix: str) -> Path | None:
    """The training step's dump ending in `suffix` (the largest, should there be several)."""
    found = sorted(dump_dir.glob(f"*{HLO_MODULE}*{suffix}"), key=lambda p: p.stat().st_size)
    return found[-1] if found else None


def step_profile(dump_dir: Path, generation: str, chips_per_slice: int) -> dict[str, Any] | None:
    """The compiled step's profile from the dumped optimized HLO, None when there is none or no
    speed model for the generation."""
    model = speed_model(generation)
    optimized = dumped(dump_dir, OPTIMIZED_SUFFIX)
    if model is None or optimized is None:
        return None
    text = optimized.read_text()
    return profile(text, chips_per_slice=chips_per_slice, mxu_width=model.hardware.mxu_width).to_json()


def compile_seconds(dump_dir: Path, ended: float) -> float | None:
    """Seconds from the train step's first dump (XLA starting its compile) to `ended` (a Unix
    time); None when the compiler dumped nothing."""
    started = [path.stat().st_mtime for path in dump_dir.glob(f"*{HLO_MODULE}*{BEFORE_SUFFIX}")]
    return round(max(0.0, ended - min(started)), 1) if started else None


def compile_step(command: list[str], *, cwd: str, env: dict[str, str], dump_dir: Path, full: bool) -> tuple[str, bool]:
    """Runs the compile; unless `full`, stops it (its own process, by pid) as soon as the
    compiler has dumped the step after buffer assignment. Returns the compile's output and
    whether it was stopped there."""
    log_path = Path(cwd) / "compile.log"
    stopped = False
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        try:
            while process.poll() is None:
                if not full and dumped(dump_dir, PLACED_SUFFIX) is not None:
                    stopped = True
                    break
                time.sleep(POLL_SECONDS)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return log_path.read_text(errors="replace"), stopped


def run_fit_check(
    job: JobSpec,
    *,
    use_cache: bool = True,
    python: Path | None = None,
    extra_flags: str = "",
    xla_flags: str = "",
    full_compile: bool = False,
    keep_dump: Path | None = None,
    base_flags: str | None = None,
) -> FitResult:
    """The fit check of `job`, from the cache when it has been run with these flags (unless
    `full_compile`, which always compiles to the end): the workers' LIBTPU_INIT_ARGS (or
    `base_flags` instead, to compare flag sets) plus `extra_flags`, and `xla_flags` as
    XLA_FLAGS. `keep_dump` keeps the compiler's dump."""
    python = python or (TRAINER_PYTHON if TRAINER_PYTHON.exists() else Path(sys.executable))
    command = compile_command(job, python)
    flags = (
        libtpu_flags(job, extra_flags) if base_flags is None else " ".join(f for f in (base_flags, extra_flags) if f)
    )
    xla_flags = " ".join(xla_flags.split())
    cached = fit_results.result_path(job, flags, xla_flags)
    if use_cache and not full_compile and cached.exists():
        return counted_by_maxtext(job, FitResult.from_json(cached.read_text()), python)
    acc = accelerator_by_ray_type(job.accelerator_type or "")
    with tempfile.TemporaryDirectory(prefix="fit-check-") as output_dir:
        command = [
            part if not part.startswith("base_output_directory=") else f"base_output_directory={output_dir}"
            for part in command
        ]
        dump_dir = Path(output_dir) / "hlo"
        environment = compile_environment(flags, dump_dir, xla_flags=xla_flags)
        output, stopped = compile_step(command, cwd=output_dir, env=environment, dump_dir=dump_dir, full=full_compile)
        placed = dumped(dump_dir, PLACED_SUFFIX)
        took = compile_seconds(dump_dir, placed.stat().st_mtime if stopped and placed is not None else time.time())
        if keep_dump is not None and dump_dir.exists():
            shutil.copytree(dump_dir, keep_dump, dirs_exist_ok=True)
        buffers = dumped(dump_dir, BUFFERS_SUFFIX)
        if stopped and buffers is not None:
            # Stopped once the step after buffer assignment was dumped: the compiler dumps it
            # only when every buffer fit its HBM (out of memory, it raises first).
            result = memory_result(job, buffer_memory(buffers.read_text()), stage=BUFFER_ASSIGNMENT)
        else:
            result = parse_output(output, job)
            if not result.fits and buffers is not None:
                result = over_limit(job, result, buffers)
        if result.fits:
            work = model_flops(job, python=python)
            try:
                step, unreadable = step_profile(dump_dir, acc.name, acc.shape(job.topology or "").chips), None
            except HloError as error:  # the memory answer stands; only the prediction is missing
                step, unreadable = None, str(error)
            result = dataclasses.replace(
                result,
                generation=acc.name,
                tokens_per_chip=work.tokens_per_chip,
                model_flops_per_chip=work.per_chip,
                model_flops_source=work.source,
                profile=step,
                unreadable_step=unreadable,
            )
    result = dataclasses.replace(result, configuration=configuration(job, flags, xla_flags), compile_seconds=took)
    if result.fits or result.message:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(result.to_json())
    return result


def published_job(run: PublishedRun, changed: Mapping[str, str] | None = None) -> tuple[JobSpec, str]:
    """A published run's configuration as the fit check compiles it (with `changed` settings on
    top), and the recipe's flags to compile it with beside the workers' own."""
    preset = next(name for name, candidate in PRESETS.items() if candidate.runs_on_tpu)
    spec = compile_spec(
        run,
        preset=preset,
        preset_overrides=PRESETS[preset].maxtext_overrides,
        base=base_config(),
        changed=changed,
    )
    job = fit_check_job(spec.preset, slices=spec.slices, topology=spec.topology, overrides=spec.overrides)
    return job, spec.extra_flags


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", required=True, choices=[p for p, v in PRESETS.items() if v.runs_on_tpu])
    parser.add_argument("--topology", help="slice topology, for example 4x8 (default: the preset's)")
    parser.add_argument("--slices", type=int, help="slice count (default: the preset's)")
    parser.add_argument("--no-cache", action="store_true", help="compile even when a result is cached")
    parser.add_argument("--output", type=Path, help="also write the result as JSON to this file")
    parser.add_argument(
        "--full-compile",
        action="store_true",
        help="run the compile to the end (code generation too: several times longer) instead of the cache",
    )
    parser.add_argument("--hlo-dump", type=Path, metavar="DIR", help="keep the compiler's HLO dump in DIR")
    parser.add_argument(
        "--report",
        type=Path,
        metavar="PATH",
        help="also write the result as a self-contained HTML page to PATH: HBM by kind against the usable "
        "capacity, the margin, the ways to fit, the predicted speed and its error band",
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="MaxText settings to add or override")
    args = parser.parse_args(argv)
    malformed = [pair for pair in args.overrides if "=" not in pair or pair.startswith("=")]
    if malformed:
        parser.error(f"{', '.join(malformed)}: overrides are KEY=VALUE, for example weight_dtype=bfloat16")
    try:
        overrides = dict(pair.split("=", 1) for pair in args.overrides)
        job = fit_check_job(args.preset, slices=args.slices, topology=args.topology, overrides=overrides)
        extra = os.environ.get(EXTRA_FLAGS_VARIABLE, "")
        xla_flags = os.environ.get(XLA_FLAGS_VARIABLE, "")
        if extra:
            print(f"fit check: compiling with the workers' flags plus {EXTRA_FLAGS_VARIABLE}: {extra}")
        if xla_flags.strip():
            print(f"fit check: compiling with {XLA_FLAGS_VARIABLE}: {xla_flags}")
        result = run_fit_check(
            job,
            use_cache=not args.no_cache,
            extra_flags=extra,
            xla_flags=xla_flags,
            full_compile=args.full_compile,
            keep_dump=args.hlo_dump,
        )
    except JobError as error:
        print(f"fit check: {error}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as error:
        print(f"fit check failed: {error}", file=sys.stderr)
        return 2
    print(result.report())
    if args.output:
        args.output.write_text(result.to_json())
    work = model_flops(job)
    print(f"model FLOPs per step (all chips; {work.described}): {work.per_step:.4g}")
    if args.report:
        try:
            write_page(args.report, result)
        except OSError as error:
            print(f"fit check: could not write the page to {args.report}: {error.strerror or error}", file=sys.stderr)
            return 2
        print(f"fit check page: {args.report}")
    return 0 if result.fits else 1


def write_page(path: Path, result: FitResult) -> None:
    """The result's page (domain/reports/fit_page.py) at `path`, its directories made as needed;
    OSError when it cannot be written (a parent that is a file: "Not a directory")."""
    if not path.parent.exists():  # a parent that is a file is left for the write to name
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fit_page(result))


if __name__ == "__main__":
    sys.exit(main())
