"""Measures the cross-slice (DCN) all-reduce of a TPU cluster: the rate each chip achieves over the
data-centre network and the time of one ring step, the two terms the multislice speed model
cannot know without a real cluster; with a preset (`--preset`), also that preset's steady step
on 1 slice and on 2, and so what the second slice costs each step.

On the RayCluster, as a Ray job (one Ray Train worker per TPU VM of every slice, as the trainers):

    python -m trainer.dcn_probe --generation v6e --topology 4x4 --slices 2 [--preset llama3-8b]

On CPU processes standing in for slices: `--cpu --slices 2` as a Ray job on a local cluster, or
each process started by hand with `--coordinator HOST:PORT --num-processes P --process-id I`.

Every chip holds an array of float32s, the same on every chip of a slice (slice s holds s + 1);
a psum over the mesh's `dcn` axis only (devices grouped by `slice_index` on TPU, by process on
CPU) adds each chip's array to the arrays of the chips at its place in the other slices. It is
timed for sizes from --min-bytes to --max-bytes per chip, after warm-up calls, the median of
--tries tries on each process and the slowest process's median; each try's result is checked to
be 1 + 2 + ... + slices, and a wrong sum fails the run. Then a least-squares fit of

    seconds = 2 (N - 1) x seconds per ring step + bytes sent per chip / achieved bytes per second

with bytes sent per chip = 2 x size x (N - 1) / N over N slices. With `--preset`, the preset then
trains --preset-steps steps on synthetic data, without checkpoints, twice, as the trainers run
it: on 1 slice and on 2 (each run its own Ray Train worker group); each run's step is the median
of the steps MaxText logs after the first --preset-warmup. It prints a readable block, then one
line of JSON. What to do with the numbers: docs/capacity.md, "Measuring the DCN rate
on your cluster". JAX and Ray are imported only where a process measures or launches.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from domain.perf import hlo_profile
from domain.perf.dcn import slowdown_percent
from domain.perf.multislice_runs import dcn_term
from domain.perf.preset_layouts import shipped_compile
from domain.tpu.tpu_catalog import ACCELERATORS, accelerator
from domain.training.job import JobError, JobSpec, resolve_job
from domain.training.job_events import maxtext_step
from domain.training.presets import PRESETS

CPU = "cpu"  # the generation of a run on CPU processes
FLOAT32_BYTES = 4
DEFAULT_MIN_BYTES = 64 * 1024
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
SIZE_FACTOR = 4  # each size is this many times the one before
DEFAULT_TRIES = 5
DEFAULT_WARMUP = 2
# Small all-reduces are dispatched back to back, up to this many bytes per chip or MAX_REPEATS
# calls, and timed together: JAX's dispatch of one call then overlaps the run of the one before
# instead of adding to a time of tens of microseconds.
REPEAT_BYTES = 16 * 1024 * 1024
MAX_REPEATS = 16
# A preset's runs: enough steps after the warm-up for a median that one slow step does not move;
# the first steps compile and settle (on CPU here, step 1 still took 20 times a steady step).
DEFAULT_PRESET_STEPS = 12
DEFAULT_PRESET_WARMUP = 2
# The slice counts a preset's step is measured on: the step each chip takes alone on one slice,
# and with the DCN all-reduce of a second (what the fit check predicts for 2 slices).
PRESET_SLICES = (1, 2)


class ProbeError(ValueError):
    """A setting, or a cluster, the probe cannot measure: exit 2, naming the setting, its value
    and what is valid."""


class MeasurementError(RuntimeError):
    """A measurement that cannot be trusted: a wrong sum, or timings no fit can explain (exit 1)."""


@dataclass(frozen=True)
class ProbeSettings:
    """What one run measures, parsed from the command line; workers get it as a dict."""

    slices: int
    generation: str  # a name in the TPU catalog, or CPU
    topology: str | None = None  # of one slice; needed to launch Ray Train workers on TPU
    min_bytes: int = DEFAULT_MIN_BYTES
    max_bytes: int = DEFAULT_MAX_BYTES
    tries: int = DEFAULT_TRIES
    warmup: int = DEFAULT_WARMUP
    step_seconds_1: float | None = None
    step_seconds_2: float | None = None
    # A preset whose step the probe measures itself on 1 and on 2 slices (Ray job only).
    preset: str | None = None
    preset_steps: int = DEFAULT_PRESET_STEPS
    preset_warmup: int = DEFAULT_PRESET_WARMUP
    # A process started by hand (CPU only): where JAX's coordinator is, how many processes, which.
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None

    @property
    def use_tpu(self) -> bool:
        return self.generation != CPU

    @property
    def given_steps(self) -> StepComparison | None:
        if self.step_seconds_1 is None or self.step_seconds_2 is None:
            return None
        return StepComparison(self.step_seconds_1, self.step_seconds_2)

    @property
    def line_bytes_per_second_per_chip(self) -> float | None:
        return accelerator(self.generation).dcn_bytes_per_second_per_chip if self.use_tpu else None

    def sizes(self) -> list[int]:
        """The array sizes timed, in bytes per chip: --min-bytes, then SIZE_FACTOR times the one
        before while it is below --max-bytes, then --max-bytes."""
        sizes = []
        size = self.min_bytes
        while size < self.max_bytes:
            sizes.append(size)
            size *= SIZE_FACTOR
        return [*sizes, self.max_bytes]

    def as_config(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Point:
    """One size's time: the bytes each chip sends across slices, and the seconds it took."""

    bytes_per_chip: float
    seconds: float


@dataclass(frozen=True)
class Fit:
    seconds_per_ring_step: float
    achieved_bytes_per_second_per_chip: float
    # The unconstrained fit gave a negative time per step; it is then 0 and the rate refitted.
    ring_step_clamped: bool = False


@dataclass(frozen=True)
class PredictedSteps:
    """What the speed model predicts for a preset's two runs, from the recorded compile of the
    shipped preset on 2 slices (domain/perf/preset_layouts.json): its step on 1 slice (each
    chip's work unchanged) and on 2, with the DCN term's held-out band (or "uncalibrated")."""

    seconds_1: float
    seconds_2: float
    band: str

    @property
    def slowdown_percent(self) -> float:
        return slowdown_percent(self.seconds_1, self.seconds_2 - self.seconds_1)


@dataclass(frozen=True)
class Unpredicted:
    """Why the speed model has no prediction of a preset's two runs to print beside them."""

    reason: str


@dataclass(frozen=True)
class StepComparison:
    """One preset's steady step time on 1 slice and on 2 at the same per-chip batch: measured by
    the probe (`preset` names it, `predicted` is the speed model's figure beside it) or given on
    the command line (`preset` None)."""

    seconds_1: float
    seconds_2: float
    preset: str | None = None
    timed_steps: int | None = None  # each measured run's steps after the warm-up
    predicted: PredictedSteps | Unpredicted | None = None

    @property
    def slowdown_percent(self) -> float:
        """S1 / S2 - 1, in percent: the change of each chip's throughput from 1 slice to 2 at the
        same per-chip batch (negative when each chip is slower on 2)."""
        return slowdown_percent(self.seconds_1, self.extra_seconds)

    @property
    def extra_seconds(self) -> float:
        return self.seconds_2 - self.seconds_1

    def record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "step_seconds_1": self.seconds_1,
            "step_seconds_2": self.seconds_2,
            "slowdown_percent": self.slowdown_percent,
            "extra_seconds": self.extra_seconds,
        }
        if self.preset is not None:
            record.update(preset=self.preset, timed_steps=self.timed_steps)
        if isinstance(self.predicted, PredictedSteps):
            record.update(
                predicted_step_seconds_1=self.predicted.seconds_1,
                predicted_step_seconds_2=self.predicted.seconds_2,
                predicted_slowdown_percent=self.predicted.slowdown_percent,
                slowdown_error_points=self.predicted.slowdown_percent - self.slowdown_percent,
                predicted_band=self.predicted.band,
            )
        elif isinstance(self.predicted, Unpredicted):
            record.update(not_predicted=self.predicted.reason)
        return record

    def report(self) -> str:
        source = (
            "given"
            if self.preset is None
            else f"{self.preset}, measured: the median of {self.timed_steps} steps after the warm-up on each"
        )
        lines = [
            f"the preset's step ({source}): {self.seconds_1:.4g} s on 1 slice, {self.seconds_2:.4g} s on 2: "
            f"{self.extra_seconds:+.4g} s per step; per-chip throughput S1/S2 - 1 = {self.slowdown_percent:+.2f}%"
        ]
        if isinstance(self.predicted, PredictedSteps):
            predicted = self.predicted
            lines += [
                f"the speed model predicted: {predicted.seconds_1:.4g} s on 1 slice, {predicted.seconds_2:.4g} s on 2: "
                f"per-chip throughput {predicted.slowdown_percent:+.2f}%; predicted minus measured: "
                f"{predicted.slowdown_percent - self.slowdown_percent:+.2f} percentage points (as the band counts "
                "its errors: predicted minus published)",
                f"  the DCN term's band: {predicted.band}",
            ]
        elif isinstance(self.predicted, Unpredicted):
            lines.append(f"the speed model's prediction: none: {self.predicted.reason}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ProbeResult:
    generation: str
    slices: int
    chips_per_slice: int
    processes: int
    device_kind: str
    points: tuple[Point, ...]
    fit: Fit
    line_bytes_per_second_per_chip: float | None
    tries: int
    warmup: int
    steps: StepComparison | None = None

    @property
    def seconds_per_transfer(self) -> float:
        """What one all-reduce across these slices costs before its bytes: the fit's intercept,
        the model's per-transfer latency plus its ring steps' (on one slice count the two are one
        number)."""
        return ring_steps(self.slices) * self.fit.seconds_per_ring_step

    def model_figures(self) -> tuple[float, float] | None:
        """The DCN term's own figures for this probe (domain/perf/dcn.py, fitted on published
        runs): (achieved bytes per second per chip, seconds per transfer across these slices)."""
        term = dcn_term()
        if term is None or self.line_bytes_per_second_per_chip is None:
            return None
        return (
            term.rate(self.line_bytes_per_second_per_chip),
            term.seconds_per_transfer + ring_steps(self.slices) * term.seconds_per_ring_step,
        )

    @property
    def achieved_fraction(self) -> float | None:
        if self.line_bytes_per_second_per_chip is None:
            return None
        return self.fit.achieved_bytes_per_second_per_chip / self.line_bytes_per_second_per_chip

    def record(self) -> dict[str, Any]:
        """The JSON line's fields."""
        model = self.model_figures()
        record: dict[str, Any] = {
            "generation": self.generation,
            "slices": self.slices,
            "achieved_bytes_per_second_per_chip": self.fit.achieved_bytes_per_second_per_chip,
            "line_bytes_per_second_per_chip": self.line_bytes_per_second_per_chip,
            "achieved_fraction": self.achieved_fraction,
            "seconds_per_ring_step": self.fit.seconds_per_ring_step,
            "seconds_per_transfer": self.seconds_per_transfer,
            "model_achieved_bytes_per_second_per_chip": model[0] if model else None,
            "model_seconds_per_transfer": model[1] if model else None,
            "points": [{"bytes_per_chip": p.bytes_per_chip, "seconds": p.seconds} for p in self.points],
        }
        if self.steps is not None:
            record.update(self.steps.record())
        return record

    def to_json(self) -> str:
        return json.dumps(self.record(), allow_nan=False)

    def report(self) -> str:
        """The readable block."""
        fit = self.fit
        steps = ring_steps(self.slices)
        lines = [
            f"DCN probe: {self.generation}, {self.slices} slices of {self.chips_per_slice} chip(s) "
            f"({self.device_kind}, {self.processes} processes)",
            f"all-reduce across slices (psum over `dcn`), float32; median of {self.tries} tries after "
            f"{self.warmup} warm-up call(s), the slowest process's; each try's sums checked",
            f"  {'array per chip':>15}  {'sent per chip':>14}  {'seconds':>11}  {'GB/s per chip':>13}",
        ]
        for point in self.points:
            size = point.bytes_per_chip * self.slices / (2 * (self.slices - 1))
            lines.append(
                f"  {_bytes(size):>15}  {_bytes(point.bytes_per_chip):>14}  {point.seconds:>11.6f}  "
                f"{point.bytes_per_chip / point.seconds / 1e9:>13.3f}"
            )
        lines.append(
            f"fit: seconds = {steps} ring steps x {fit.seconds_per_ring_step:.3e} s + bytes sent per chip / "
            f"{fit.achieved_bytes_per_second_per_chip:.4g} B/s"
        )
        if fit.ring_step_clamped:
            lines.append("  (the unconstrained fit gave a negative time per ring step: it is 0, the rate refitted)")
        lines.append(f"achieved bytes per second per chip: {fit.achieved_bytes_per_second_per_chip:.4g}")
        if self.line_bytes_per_second_per_chip is None:
            lines.append(f"achieved fraction: unknown (the catalog has no DCN line rate for {self.generation})")
        else:
            lines.append(
                f"achieved fraction: {self.achieved_fraction:.3f} of {self.generation}'s line rate, "
                f"{self.line_bytes_per_second_per_chip:.4g} B/s per chip"
            )
        lines.append(f"seconds per ring step: {fit.seconds_per_ring_step:.3e}")
        lines.append(
            f"seconds per transfer across {self.slices} slices (before its bytes): {self.seconds_per_transfer:.3e}"
        )
        model = self.model_figures()
        if model is not None:
            lines.append(
                f"the DCN term (fitted on published runs) says: {model[0]:.4g} B/s per chip, "
                f"{model[1]:.3e} s per transfer across {self.slices} slices"
            )
        if self.steps is not None:
            lines.append(self.steps.report())
        return "\n".join(lines)


def _bytes(count: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def ring_steps(slices: int) -> int:
    """Steps of the probe's all-reduce over `slices`, as the compiled step's are counted
    (domain/perf/hlo_profile.py): N - 1 to reduce-scatter, N - 1 to all-gather."""
    return int(hlo_profile.ring_steps("ALL_REDUCE", slices))


def bytes_sent_per_chip(size: float, slices: int) -> float:
    """What one chip sends across slices in the probe's all-reduce of `size` bytes, counted as
    the compiled step's cross-slice all-reduces are."""
    return hlo_profile.all_reduce_bytes(size, slices)


def fit_all_reduce(points: Sequence[Point], slices: int) -> Fit:
    """Least squares of seconds = ring_steps(slices) x a + bytes_per_chip / b over the points, in
    relative error (each point's residual over its seconds), so the small sizes that carry the
    time per step count as much as the large ones that carry the rate. A negative a is clamped
    to 0 and b refitted; MeasurementError when the time does not grow with the bytes."""
    if len({point.bytes_per_chip for point in points}) < 2:
        raise MeasurementError("the fit needs the times of at least two sizes")
    steps = ring_steps(slices)
    # Divided by each time, the model is 1 = u a + v c, with u = steps / t, v = bytes / t, c = 1 / b.
    u = [steps / point.seconds for point in points]
    v = [point.bytes_per_chip / point.seconds for point in points]
    uu, uv, vv = sum(x * x for x in u), sum(x * y for x, y in zip(u, v, strict=True)), sum(y * y for y in v)
    determinant = uu * vv - uv * uv
    a = (vv * sum(u) - uv * sum(v)) / determinant if determinant > 0 else -1.0
    c = (uu * sum(v) - uv * sum(u)) / determinant if determinant > 0 else 0.0
    clamped = a < 0
    if clamped:
        a, c = 0.0, sum(v) / vv
    if c <= 0 or not math.isfinite(c):
        times = ", ".join(f"{point.bytes_per_chip:.0f} B: {point.seconds:.3g} s" for point in points)
        raise MeasurementError(f"the times do not grow with the bytes sent, so no rate fits them ({times})")
    return Fit(seconds_per_ring_step=a, achieved_bytes_per_second_per_chip=1 / c, ring_step_clamped=clamped)


def _divisors(count: int) -> str:
    return ", ".join(str(d) for d in range(2, count + 1) if count % d == 0) or "none"


def slice_groups(devices: Sequence[Any], slices: int, *, use_tpu: bool) -> list[list[Any]]:
    """The devices by slice, each slice's by id: TPU devices by their `slice_index`; on CPU each
    process stands in for a slice's host, and consecutive processes make a slice. ProbeError
    when they do not make `slices` slices of the same size."""
    count = len(devices)
    if count % slices:
        raise ProbeError(
            f"--slices {slices}: the job's {count} devices do not split into {slices} slices of equal size; "
            f"use a slice count that divides {count} ({_divisors(count)})"
        )
    if use_tpu:
        key: Callable[[Any], int] = lambda device: device.slice_index  # noqa: E731
    else:
        processes = sorted({device.process_index for device in devices})
        if len(processes) % slices:
            raise ProbeError(
                f"--slices {slices}: the job's {len(processes)} CPU processes do not split into {slices} slices; "
                f"use a slice count that divides {len(processes)} ({_divisors(len(processes))})"
            )
        per_slice = len(processes) // slices
        rank = {process: index for index, process in enumerate(processes)}
        key = lambda device: rank[device.process_index] // per_slice  # noqa: E731
    by_slice: dict[int, list[Any]] = {}
    for device in devices:
        by_slice.setdefault(key(device), []).append(device)
    if len(by_slice) != slices:
        raise ProbeError(
            f"--slices {slices}: the job's devices are on {len(by_slice)} slice(s) (slice_index "
            f"{', '.join(map(str, sorted(by_slice)))}); give --slices {len(by_slice)}"
            + ("" if len(by_slice) >= 2 else ", on a cluster of 2 slices or more")
        )
    sizes = sorted({len(group) for group in by_slice.values()})
    if len(sizes) > 1:
        raise ProbeError(
            f"--slices {slices}: the slices hold different numbers of devices ({sizes}); the probe needs equal slices"
        )
    return [sorted(by_slice[index], key=lambda device: device.id) for index in sorted(by_slice)]


def parse_settings(argv: Sequence[str]) -> ProbeSettings:
    """The command line as a ProbeSettings; ProbeError naming every bad setting."""
    parser = argparse.ArgumentParser(prog="python -m trainer.dcn_probe", description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--generation", choices=list(ACCELERATORS), help="the TPU generation (default v6e)")
    where.add_argument("--cpu", action="store_true", help="CPU processes standing in for slices (a check of the probe)")
    parser.add_argument("--topology", help="one slice's topology, e.g. 4x4: how many TPU VMs to start workers on")
    parser.add_argument("--slices", type=int, required=True, help="how many slices the all-reduce spans (2 or more)")
    parser.add_argument("--min-bytes", type=int, default=DEFAULT_MIN_BYTES, help="smallest array per chip, in bytes")
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, help="largest array per chip, in bytes")
    parser.add_argument("--tries", type=int, default=DEFAULT_TRIES, help="timed tries per size (the median is kept)")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="untimed calls per size before the tries")
    parser.add_argument(
        "--preset", choices=list(PRESETS), help="also measure this preset's steady step on 1 slice and on 2"
    )
    parser.add_argument(
        "--preset-steps", type=int, default=DEFAULT_PRESET_STEPS, help="steps of each of the preset's two runs"
    )
    parser.add_argument(
        "--preset-warmup",
        type=int,
        default=DEFAULT_PRESET_WARMUP,
        help="first steps of each run left out of its median (they compile and settle)",
    )
    parser.add_argument("--step-seconds-1", type=float, help="the preset's steady step time on 1 slice, in seconds")
    parser.add_argument("--step-seconds-2", type=float, help="the same preset's steady step time on 2 slices")
    parser.add_argument("--coordinator", help="HOST:PORT of JAX's coordinator, for a CPU process started by hand")
    parser.add_argument("--num-processes", type=int, help="how many processes were started by hand")
    parser.add_argument("--process-id", type=int, help="this process's index among them, from 0")
    args = parser.parse_args(argv)
    settings = ProbeSettings(
        slices=args.slices,
        generation=CPU if args.cpu else args.generation or "v6e",
        topology=args.topology,
        min_bytes=args.min_bytes,
        max_bytes=args.max_bytes,
        tries=args.tries,
        warmup=args.warmup,
        step_seconds_1=args.step_seconds_1,
        step_seconds_2=args.step_seconds_2,
        preset=args.preset,
        preset_steps=args.preset_steps,
        preset_warmup=args.preset_warmup,
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
    )
    problems = settings_problems(settings)
    if problems:
        raise ProbeError("; ".join(problems))
    return settings


def settings_problems(settings: ProbeSettings) -> list[str]:
    problems = []
    if settings.slices < 2:
        problems.append(f"--slices {settings.slices}: use 2 or more (the probe times an all-reduce across slices)")
    for flag, seconds in (("--step-seconds-1", settings.step_seconds_1), ("--step-seconds-2", settings.step_seconds_2)):
        if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
            problems.append(f"{flag} {seconds}: use the preset's steady step time in seconds, a number above 0")
    if (settings.step_seconds_1 is None) != (settings.step_seconds_2 is None):
        given = "--step-seconds-1" if settings.step_seconds_1 is not None else "--step-seconds-2"
        problems.append(f"{given} alone: give both --step-seconds-1 and --step-seconds-2, or neither")
    if settings.min_bytes < FLOAT32_BYTES or settings.min_bytes % FLOAT32_BYTES:
        problems.append(f"--min-bytes {settings.min_bytes}: use a whole number of 4-byte floats, 4 or more")
    if settings.max_bytes % FLOAT32_BYTES or settings.max_bytes <= settings.min_bytes:
        problems.append(
            f"--max-bytes {settings.max_bytes}: use a whole number of 4-byte floats above --min-bytes "
            f"({settings.min_bytes}): the fit needs at least two sizes"
        )
    if settings.tries < 1:
        problems.append(f"--tries {settings.tries}: use 1 or more")
    if settings.warmup < 0:
        problems.append(f"--warmup {settings.warmup}: use 0 or more")
    problems += preset_problems(settings)
    by_hand = (settings.coordinator, settings.num_processes, settings.process_id)
    if any(value is not None for value in by_hand):
        if any(value is None for value in by_hand):
            problems.append("--coordinator, --num-processes and --process-id: give all three, or none (a Ray job)")
        elif settings.use_tpu:
            problems.append(
                f"--coordinator {settings.coordinator}: processes started by hand are CPU processes (--cpu); "
                "on TPU run the probe as a Ray job"
            )
        else:
            assert settings.num_processes is not None and settings.process_id is not None
            if settings.num_processes < settings.slices or settings.num_processes % settings.slices:
                problems.append(
                    f"--num-processes {settings.num_processes}: use a multiple of --slices ({settings.slices}), "
                    "each slice one or more processes"
                )
            if not 0 <= settings.process_id < settings.num_processes:
                problems.append(
                    f"--process-id {settings.process_id}: use 0 to {settings.num_processes - 1} (--num-processes)"
                )
    elif settings.use_tpu:
        shapes = accelerator(settings.generation).shapes
        if settings.topology not in shapes:
            problems.append(
                f"--topology {settings.topology}: use a topology of TPU {settings.generation}, one of {', '.join(shapes)}"
            )
    elif settings.topology is not None:
        problems.append(f"--topology {settings.topology}: a CPU run has none; each slice is one worker process")
    return problems


def preset_problems(settings: ProbeSettings) -> list[str]:
    """What keeps `--preset` from being measured on this cluster: the job of each of its two runs
    is resolved as the workloads stack resolves one, so a layout that cannot run there is refused
    before anything starts."""
    if settings.preset is None:
        return []
    if settings.step_seconds_1 is not None or settings.step_seconds_2 is not None:
        return [
            f"--preset {settings.preset} with --step-seconds-1/--step-seconds-2: give the step times or the "
            "preset whose step the probe measures, not both"
        ]
    if settings.coordinator is not None:
        return [f"--preset {settings.preset}: a preset's step is measured only by a Ray job, not by hand"]
    problems = []
    if settings.preset_warmup < 0:
        problems.append(f"--preset-warmup {settings.preset_warmup}: use 0 or more")
    if settings.preset_steps <= max(settings.preset_warmup, 0):
        problems.append(
            f"--preset-steps {settings.preset_steps}: use more than --preset-warmup ({settings.preset_warmup}), "
            "so that steps are left to time"
        )
    # The generation the probe runs on, in the presets' terms (None: CPU).
    here = settings.generation if settings.use_tpu else None
    chosen = PRESETS[settings.preset]
    if chosen.accelerator_name != here:
        where = "CPU (--cpu)" if here is None else f"TPU {here}"
        fitting = [name for name, preset in PRESETS.items() if preset.accelerator_name == here]
        problems.append(
            f"--preset {settings.preset}: it trains on "
            f"{'CPU' if chosen.accelerator_name is None else 'TPU ' + chosen.accelerator_name}, this probe runs on "
            f"{where}; use a preset of {where}: {', '.join(fitting) or 'there is none'}"
        )
        return problems
    if problems:
        return problems
    for slices in PRESET_SLICES:
        try:
            preset_job(settings, slices, checkpoint_root="/unused")
        except JobError as error:
            problems += [f"--preset {settings.preset} on {slices} slice(s): {problem}" for problem in error.problems]
    return problems


def predicted_steps(preset: str, generation: str, topology: str | None) -> PredictedSteps | Unpredicted:
    """The speed model's prediction of `preset` on 1 slice and on 2 of `topology`, from the
    recorded compile of the shipped preset; Unpredicted saying why where there is none."""
    chosen = PRESETS[preset]
    if not chosen.runs_on_tpu:
        return Unpredicted(f"{preset} trains on CPU; the speed model predicts TPU steps")
    if topology != chosen.topology or generation != chosen.accelerator_name:
        return Unpredicted(
            f"{preset}'s compile is recorded on its own slices ({chosen.accelerator_name} {chosen.topology}), not "
            f"{generation} {topology}; the fit check of the preset on {topology} x 2 slices predicts it"
        )
    compiled = shipped_compile(preset)
    if compiled is None or compiled.slices != PRESET_SLICES[-1]:
        return Unpredicted(f"no compile of {preset} on {PRESET_SLICES[-1]} slices is recorded")
    prediction = compiled.prediction(generation)
    cost = prediction.multislice if prediction is not None else None
    if cost is None:
        return Unpredicted(f"the speed model has no prediction of {preset} on {generation}")
    if cost.not_known is not None:
        return Unpredicted(cost.not_known)
    return PredictedSteps(seconds_1=cost.one_slice_seconds, seconds_2=cost.step_seconds, band=cost.band.describe())


def preset_job(settings: ProbeSettings, slices: int, *, checkpoint_root: str) -> JobSpec:
    """One of the preset's two runs, resolved as the workloads stack resolves a job: on this
    probe's topology, `slices` slices, synthetic data, --preset-steps steps and no checkpoints
    (whose saves would be timed as steps). JobError when it cannot run."""
    assert settings.preset is not None
    return resolve_job(
        settings.preset,
        run_name=f"dcn-probe-{settings.preset}-{slices}-slice-{int(time.time())}",
        checkpoint_root=checkpoint_root,
        slices=slices,
        topology=settings.topology,
        max_failures=0,
        overrides={"steps": settings.preset_steps, "enable_checkpointing": "false"},
    )


def measure(settings: ProbeSettings, groups: list[list[Any]]) -> list[Point]:
    """Times the psum over `dcn` for each size on every process of the job (each must call it);
    checks every sum. The slowest process's median per size."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    slices, chips = len(groups), len(groups[0])
    mesh = Mesh(np.array(groups, dtype=object), ("dcn", "ici"))
    spec = P("dcn", "ici")
    sharding = NamedSharding(mesh, spec)
    all_reduce = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, "dcn"), mesh=mesh, in_specs=spec, out_specs=spec))
    expected = slices * (slices + 1) // 2  # 1 + 2 + ... + slices
    # Whether every element is the sum, and the smallest and largest seen (a count could overflow
    # int32 over every chip's elements; a NaN fails the test too).
    check = jax.jit(lambda y: (jnp.all(y == expected), jnp.min(y), jnp.max(y)))
    medians = []
    for size in settings.sizes():
        count = size // FLOAT32_BYTES
        array = jax.make_array_from_callback((slices, chips, count), sharding, _slice_numbers(count))
        repeats = max(1, min(MAX_REPEATS, REPEAT_BYTES // size))
        for _ in range(settings.warmup):
            jax.block_until_ready(all_reduce(array))
        tries = []
        for _ in range(settings.tries):
            start = time.perf_counter()
            results = [all_reduce(array) for _ in range(repeats)]
            jax.block_until_ready(results)
            tries.append((time.perf_counter() - start) / repeats)
            # Each try's result, outside the time: every process gets the same answer, so all stop.
            right, lowest, highest = (value.item() for value in check(results[-1]))
            if not right:
                raise MeasurementError(
                    f"the all-reduce across slices returned wrong sums: with {_bytes(size)} per chip the elements "
                    f"are {lowest:g} to {highest:g}, where each must be 1 + ... + {slices} = {expected}"
                )
            del results
        del array
        medians.append(statistics.median(tries))
    slowest = np.asarray(multihost_utils.process_allgather(np.array(medians))).reshape(-1, len(medians)).max(axis=0)
    return [
        Point(bytes_per_chip=bytes_sent_per_chip(size, slices), seconds=float(seconds))
        for size, seconds in zip(settings.sizes(), slowest, strict=True)
    ]


def _slice_numbers(count: int) -> Callable[[tuple[slice, ...] | None], Any]:
    """What each chip holds: `count` float32s, all its slice's number (its place on `dcn`) + 1."""
    import numpy as np

    def shard(index: tuple[slice, ...] | None) -> Any:
        assert index is not None
        return np.full((1, 1, count), (index[0].start or 0) + 1, dtype=np.float32)

    return shard


def probe(settings: ProbeSettings) -> ProbeResult | None:
    """Measures on this process (every process of the job runs it); the result on process 0."""
    import jax

    groups = slice_groups(jax.devices(), settings.slices, use_tpu=settings.use_tpu)
    points = measure(settings, groups)
    if jax.process_index() != 0:
        return None
    return ProbeResult(
        generation=settings.generation,
        slices=settings.slices,
        chips_per_slice=len(groups[0]),
        processes=jax.process_count(),
        device_kind=groups[0][0].device_kind,
        points=tuple(points),
        fit=fit_all_reduce(points, settings.slices),
        line_bytes_per_second_per_chip=settings.line_bytes_per_second_per_chip,
        tries=settings.tries,
        warmup=settings.warmup,
        steps=settings.given_steps,
    )


def print_result(result: ProbeResult) -> None:
    print(result.report(), flush=True)
    print(result.to_json(), flush=True)


def run_by_hand(settings: ProbeSettings) -> int:
    """One CPU process of a job started by hand: joins JAX's coordinator as the CPU trainer's
    workers do (process 0 binds it to its address only), measures, and process 0 prints."""
    os.environ.update({"JAX_PLATFORMS": "cpu"})
    import jax

    assert settings.coordinator is not None
    jax.distributed.initialize(
        settings.coordinator,
        num_processes=settings.num_processes,
        process_id=settings.process_id,
        coordinator_bind_address=settings.coordinator if settings.process_id == 0 else None,
    )
    try:
        result = probe(settings)
    except ProbeError as error:
        print(f"dcn probe: {error}", file=sys.stderr, flush=True)
        return 2
    except MeasurementError as error:
        print(f"dcn probe failed: {error}", file=sys.stderr, flush=True)
        return 1
    if result is not None:
        print_result(result)
    return 0


def probe_worker(config: dict[str, Any]) -> None:
    """What each Ray Train worker runs: joins the group's JAX processes (on TPU Ray Train has),
    measures, and rank 0 hands the result to the driver's box."""
    import ray
    import ray.train

    settings = ProbeSettings(**config["settings"])
    if not settings.use_tpu:
        from trainer.train_loop import _join_cpu_workers

        context = ray.train.get_context()
        _join_cpu_workers(context.get_world_rank(), context.get_world_size())
    result = probe(settings)
    if result is not None:
        ray.get(config["box"].put.remote(result))


class _LoggedSteps(logging.Handler):
    """The (step, seconds) of each step MaxText logs on this worker, in order."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.steps: list[tuple[int, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        step = maxtext_step(record.getMessage())
        if step is not None:
            self.steps.append(step)


def preset_worker(config: dict[str, Any]) -> None:
    """What each Ray Train worker of a preset's run runs: the trainers' own loop (MaxText's
    pre-training), with the steps MaxText logs kept; rank 0 hands them to the driver's box."""
    import ray
    import ray.train

    from trainer.train_loop import train_loop_per_worker

    logged = _LoggedSteps()
    absl = logging.getLogger("absl")  # where MaxText logs its steps (trainer/events.py)
    absl.addHandler(logged)
    try:
        train_loop_per_worker(config["loop"])
    finally:
        absl.removeHandler(logged)
    if ray.train.get_context().get_world_rank() == 0:
        ray.get(config["box"].put_steps.remote(config["slices"], logged.steps))


def steady_seconds(steps: Sequence[tuple[int, float]], warmup: int, slices: int) -> float:
    """A run's steady step: the median of the seconds MaxText logged after its first `warmup`
    steps. MeasurementError when none are left."""
    timed = [seconds for _, seconds in steps[warmup:]]
    if not timed:
        raise MeasurementError(
            f"the preset's run on {slices} slice(s) logged {len(steps)} step(s), none after the "
            f"{warmup} of its warm-up: there is no step to time"
        )
    return statistics.median(timed)


class _ResultBox:
    """Holds rank 0's results for the driver (Ray Train keeps no result of a run without a
    checkpoint): the probe's, and each preset run's logged steps by slice count."""

    def __init__(self) -> None:
        self.result: ProbeResult | None = None
        self.steps: dict[int, list[tuple[int, float]]] = {}

    def put(self, result: ProbeResult) -> None:
        self.result = result

    def get(self) -> ProbeResult | None:
        return self.result

    def put_steps(self, slices: int, steps: list[tuple[int, float]]) -> None:
        self.steps[slices] = steps

    def get_steps(self, slices: int) -> list[tuple[int, float]] | None:
        return self.steps.get(slices)


def run_on_ray(settings: ProbeSettings) -> int:
    """The driver of a Ray job: one Ray Train worker per TPU VM of every slice (per stand-in
    slice on CPU), as the multislice trainer starts them; then, with --preset, the preset's runs
    on 1 and on 2 slices; prints rank 0's result."""
    import ray
    from ray.train.v2.api.config import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    from domain.training.job import CPU_WORKER_ENV

    if settings.use_tpu:
        assert settings.topology is not None
        generation = accelerator(settings.generation)
        shape = generation.shape(settings.topology)
        scaling = ScalingConfig(
            num_workers=settings.slices * shape.vms,
            use_tpu=True,
            topology=settings.topology,
            accelerator_type=generation.ray_accelerator_type,
            resources_per_worker={"TPU": float(shape.chips_per_vm)},
            placement_strategy="SPREAD",
        )
    else:
        scaling = ScalingConfig(
            num_workers=settings.slices, use_tpu=False, resources_per_worker={"CPU": 1.0}, placement_strategy="SPREAD"
        )
    ray.init()
    box_class: Any = ray.remote(num_cpus=0)(_ResultBox)  # an actor class: Ray's stubs type it as a function
    box = box_class.remote()
    trainer = JaxTrainer(
        train_loop_per_worker=probe_worker,
        train_loop_config={"settings": settings.as_config(), "box": box},
        scaling_config=scaling,
        run_config=RunConfig(
            name=f"dcn-probe-{int(time.time())}",
            failure_config=FailureConfig(max_failures=0),
            worker_runtime_env={} if settings.use_tpu else {"env_vars": dict(CPU_WORKER_ENV)},
        ),
    )
    try:
        trainer.fit()
    except Exception as error:  # Ray Train raises what ended the run
        return _failed(error)
    result: ProbeResult | None = ray.get(box.get.remote())
    if result is None:
        print("dcn probe failed: the workers ended without a result", file=sys.stderr, flush=True)
        return 1
    return finish(result, (lambda: measure_preset(settings, box)) if settings.preset is not None else None)


def finish(result: ProbeResult, measure_steps: Callable[[], StepComparison] | None) -> int:
    """Prints the result, with the preset's steps when `measure_steps` measures them; when that
    fails, the all-reduce's figures (worth keeping) and then why, exit code 1."""
    if measure_steps is not None:
        try:
            result = dataclasses.replace(result, steps=measure_steps())
        except Exception as error:
            print_result(result)
            return _failed(error)
    print_result(result)
    return 0


def measure_preset(settings: ProbeSettings, box: Any) -> StepComparison:
    """The preset's steady step on 1 slice and on 2: each a run of the trainers' own JaxTrainer
    (trainer/maxtext_trainer.py), writing its TensorBoard under a directory of this driver that
    is removed after; MeasurementError when a run logs no step to time."""
    import ray
    from ray.train.v2.jax import JaxTrainer

    from trainer import maxtext_trainer
    from trainer.train_loop import WorkerConfig

    assert settings.preset is not None
    seconds: dict[int, float] = {}
    timed: list[int] = []  # each run's steps after the warm-up
    root = tempfile.mkdtemp(prefix="dcn-probe-runs-")
    try:
        for slices in PRESET_SLICES:
            job = preset_job(settings, slices, checkpoint_root=root)
            print(
                f"dcn probe: training {settings.preset} {settings.preset_steps} steps on {slices} slice(s)", flush=True
            )
            trainer = JaxTrainer(
                train_loop_per_worker=preset_worker,
                train_loop_config={"loop": WorkerConfig.of(job).loop_config(), "box": box, "slices": slices},
                scaling_config=maxtext_trainer.scaling_config(job),
                run_config=maxtext_trainer.run_config(job),
            )
            try:
                trainer.fit()
            except Exception as error:  # Ray Train raises what ended the run
                raise run_failed(settings.preset, slices, error) from error
            steps = ray.get(box.get_steps.remote(slices))
            if steps is None:
                raise MeasurementError(f"{settings.preset}'s run on {slices} slice(s) ended without its steps")
            seconds[slices] = steady_seconds(steps, settings.preset_warmup, slices)
            timed.append(len(steps) - settings.preset_warmup)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return StepComparison(
        seconds[1],
        seconds[2],
        preset=settings.preset,
        timed_steps=min(timed),
        predicted=predicted_steps(settings.preset, settings.generation, settings.topology),
    )


def run_failed(preset: str, slices: int, error: BaseException) -> MeasurementError:
    """What ended a preset's run, in one line: each failed worker's first line, else the error's."""
    failures = getattr(error, "worker_failures", None) or {}
    reason = "; ".join(f"rank {rank}: {_first_line(failure)}" for rank, failure in failures.items())
    return MeasurementError(
        f"{preset}'s run on {slices} slice(s) failed: {reason or f'{type(error).__name__}: {_first_line(error)}'}"
    )


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _failed(error: BaseException) -> int:
    """Says why the workers failed; 2 when it was a ProbeError (a setting that does not fit the cluster)."""
    failures = list(getattr(error, "worker_failures", {}).values()) or [error]
    for failure in failures:
        for kind, code in ((ProbeError, 2), (MeasurementError, 1)):
            found = _cause(failure, kind)
            if found is not None:
                prefix = "dcn probe" if code == 2 else "dcn probe failed"
                print(f"{prefix}: {found}", file=sys.stderr, flush=True)
                return code
    print(f"dcn probe failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    return 1


def _cause(error: BaseException | None, kind: type[Exception]) -> BaseException | None:
    """The `kind` that caused `error`: itself, a Ray task error's cause, or a chained one."""
    for _ in range(10):
        if error is None:
            return None
        cause = getattr(error, "cause", None)  # a Ray task error holds the worker's exception
        if isinstance(cause, kind):
            return cause
        if isinstance(error, kind):
            return error
        error = error.__cause__ or error.__context__
    return None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv)
    except ProbeError as error:
        print(f"dcn probe: {error}", file=sys.stderr, flush=True)
        return 2
    if settings.coordinator is not None:
        return run_by_hand(settings)
    return run_on_ray(settings)


if __name__ == "__main__":
    sys.exit(main())
