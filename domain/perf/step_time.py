"""How long a training step will take on TPUs, predicted from the compiler's optimized HLO.

Input: a StepProfile (domain/perf/hlo_profile.py), what the fit check's compile says one step does on
each chip. Per computation (the entry, each scanned layer loop's body) the model takes

    compute  = matmul FLOPs / matmul rate + kernel FLOPs / kernel FLOP rate
               + HBM bytes of each memory-bound class / that class's rate
    ICI      = bytes sent over ICI / ICI bandwidth            (inside a slice)
    host     = bytes to and from host memory / host DMA bandwidth

and, since the compiler schedules collectives and host transfers asynchronously on engines of
their own, takes the computation's time as the longest of the three: what communication adds is
only its excess over compute (attributed to ICI, then host, in that order, so the parts add up
and none is negative). Then it multiplies the sum by one calibrated constant, `overhead`, for
everything the model does not see (launch gaps, imperfect overlap). The compute rates are
libtpu's cost model's own, measured against it (benchmarks/roofline_vs_cost_model.py), so a fit
check needs no code generation. The parts are scaled by the same constant, so the breakdown adds
up to the predicted step time.

Across slices, the step adds the DCN term (domain/perf/dcn.py), fitted on published multislice
runs: its own latencies and rate, not scaled by `overhead`, and not hidden behind compute.

It is a compiler-model estimate, not a TPU measurement: calibrated on published TPU runs, with
the error on each derived next to them (domain/perf/speed_anchors.py; docs/capacity.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from domain.perf.dcn import CrossSliceTraffic, DcnBand, DcnTerm, MultisliceCost
from domain.perf.hlo_profile import Scope, StepProfile


@dataclass(frozen=True)
class Hardware:
    """One TPU generation's rates, per chip."""

    generation: str
    peak_flops: float  # bf16 FLOP/s (domain/tpu/tpu_catalog.py)
    mxu_width: int  # matmul output features are padded to whole tiles this wide
    matmul_flops_per_second: float  # padded matmul FLOPs
    kernel_flops_per_second: float  # Pallas kernels (splash attention)
    memory_bytes_per_second: float  # HBM bytes of elementwise fusions, copies, broadcasts
    reduce_bytes_per_second: float  # HBM bytes of reductions
    slice_bytes_per_second: float  # HBM bytes of slices
    ici_bytes_per_second: float  # one direction of the chip's ICI links
    dcn_bytes_per_second: float | None  # the line rate per chip (domain/tpu/tpu_catalog.py)
    host_bytes_per_second: float  # one direction of the chip's PCIe link to its host


@dataclass(frozen=True)
class Anchor:
    """A published TPU run, as the speed model sees it: what was measured, and what the fit
    check's compile of it says (domain/perf/published_recipes.py records both)."""

    name: str
    family: str  # the model family (domain/published_recipes.model_family)
    published_step_seconds: float
    calibrated: bool  # used to fit `overhead`, or only checked against
    profile: StepProfile
    slices: int = 1
    # Settings changed from the published run's to compile it (it does not fit as published):
    # its error is then measured against a run that was not exactly this one.
    changed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ErrorBand:
    """How far the speed model has been off on published runs of one model family: the spread
    of its errors there (predicted over published, minus one), or none measured."""

    family: str
    calibrated: bool  # the family has anchors the overhead is fitted on
    anchors: tuple[str, ...]  # the family's published runs the model was compared with
    low_percent: float | None  # most negative error (predicted faster than published)
    high_percent: float | None

    def step_range(self, step_seconds: float) -> tuple[float, float] | None:
        """The step times the band allows: a prediction `e` percent off means the run takes
        step / (1 + e/100)."""
        if self.low_percent is None or self.high_percent is None:
            return None
        return step_seconds / (1 + self.high_percent / 100), step_seconds / (1 + self.low_percent / 100)

    def describe(self, step_seconds: float) -> str:
        runs = f"{len(self.anchors)} published {self.family} run{'s' if len(self.anchors) != 1 else ''}"
        span = self.step_range(step_seconds)
        if span is None:
            return f"uncalibrated: no published {self.family} run checks the model; the figure above is not a promise"
        low, high = span
        measured = (
            f"error on {runs} {self.low_percent:+.1f}% to {self.high_percent:+.1f}%, so {low:.3f} to {high:.3f} s"
        )
        if self.calibrated:
            return f"calibrated on the {self.family} family: {measured}"
        return f"outside the calibrated family: {measured}"


@dataclass(frozen=True)
class SpeedModel:
    """A generation's hardware rates, calibrated on its anchors."""

    hardware: Hardware
    anchors: tuple[Anchor, ...]
    # The DCN term and its bands by DCN axis (domain/perf/multislice_runs.py); None: none fitted.
    dcn: DcnTerm | None = None
    dcn_bands: Mapping[str, DcnBand] = field(default_factory=dict)

    @cached_property
    def overhead(self) -> float:
        calibrating = [anchor for anchor in self.anchors if anchor.calibrated]
        return fitted_overhead(
            {a.name: raw_step_seconds(a.profile, self.hardware) for a in calibrating},
            {a.name: a.published_step_seconds - self.dcn_seconds(a.profile, a.slices) for a in calibrating},
        )

    def dcn_seconds(self, profile: StepProfile, slices: int) -> float:
        """What crossing slices adds to the step; 0 on one slice or with no term fitted."""
        if slices < 2 or self.dcn is None or self.hardware.dcn_bytes_per_second is None:
            return 0.0
        return self.dcn.seconds(CrossSliceTraffic.of(profile, slices), self.hardware.dcn_bytes_per_second)

    def predicted_step_seconds(self, anchor: Anchor) -> float:
        return self.overhead * raw_step_seconds(anchor.profile, self.hardware) + self.dcn_seconds(
            anchor.profile, anchor.slices
        )

    def error_percent(self, anchor: Anchor) -> float:
        published = anchor.published_step_seconds
        return 100 * (self.predicted_step_seconds(anchor) - published) / published

    @property
    def calibrated_on(self) -> tuple[str, ...]:
        return tuple(anchor.name for anchor in self.anchors if anchor.calibrated)

    def band(self, family: str) -> ErrorBand:
        """The errors on `family`'s anchors, calibrating ones included (the model was fitted to
        balance those, so they bound it less than the checks do)."""
        members = [anchor for anchor in self.anchors if anchor.family == family]
        errors = [self.error_percent(anchor) for anchor in members]
        return ErrorBand(
            family=family,
            calibrated=any(anchor.calibrated for anchor in members),
            anchors=tuple(anchor.name for anchor in members),
            low_percent=min(errors) if errors else None,
            high_percent=max(errors) if errors else None,
        )

    def predict(
        self,
        profile: StepProfile,
        *,
        tokens_per_chip: float,
        model_flops_per_chip: float,
        family: str,
        slices: int = 1,
        dcn_axis: str = "data",
    ) -> Prediction:
        """The predicted step; on several slices with `dcn_axis` (dcn.dcn_axis) across them, with
        what crossing slices costs, on these slices and on one more."""
        dcn = self.dcn_seconds(profile, slices)
        prediction = predict(
            profile,
            self.hardware,
            overhead=self.overhead,
            tokens_per_chip=tokens_per_chip,
            model_flops_per_chip=model_flops_per_chip,
            dcn_seconds=dcn,
        )
        multislice = None
        if slices > 1 and self.dcn is not None and self.hardware.dcn_bytes_per_second is not None:
            traffic = CrossSliceTraffic.of(profile, slices)
            multislice = MultisliceCost(
                slices=slices,
                axis=dcn_axis,
                one_slice_seconds=prediction.step_seconds - dcn,
                dcn_seconds=dcn,
                next_dcn_seconds=self.dcn.seconds(traffic.at(slices + 1), self.hardware.dcn_bytes_per_second),
                band=self.dcn_bands.get(dcn_axis) or DcnBand.unchecked(dcn_axis),
                transfers_counted=traffic.transfers > 0 or traffic.bytes == 0,
            )
        return replace(prediction, band=self.band(family), calibrated_on=self.calibrated_on, multislice=multislice)


@dataclass(frozen=True)
class Prediction:
    """A predicted step, its parts (they add up to it) and what it means per chip."""

    step_seconds: float
    compute_seconds: float
    exposed_ici_seconds: float
    exposed_dcn_seconds: float
    exposed_host_seconds: float
    tokens_per_second_per_chip: float
    mfu: float  # model FLOPs (MaxText's count: domain/capacity.ModelFlops) over peak
    # How far the model has been off on this model family's published runs, and the runs its
    # overhead is fitted on: a bare number is never printed.
    band: ErrorBand | None = None
    calibrated_on: tuple[str, ...] = ()
    multislice: MultisliceCost | None = None  # on several slices: what crossing them costs

    def lines(self) -> list[str]:
        lines = [f"predicted step time: {self.step_seconds:.3f} s"]
        if self.band is not None:
            lines.append(f"  {self.band.describe(self.step_seconds)}")
        if self.calibrated_on:
            lines.append(f"  calibrated on: {', '.join(self.calibrated_on)}")
        return [
            *lines,
            f"predicted tokens/s per chip: {self.tokens_per_second_per_chip:,.0f}",
            f"predicted MFU: {100 * self.mfu:.1f}%",
            f"predicted breakdown: compute {self.compute_seconds:.3f} s, exposed ICI "
            f"{self.exposed_ici_seconds:.3f} s, exposed DCN {self.exposed_dcn_seconds:.3f} s, "
            f"host transfer {self.exposed_host_seconds:.3f} s",
            *(self.multislice.lines() if self.multislice is not None else []),
        ]


@dataclass(frozen=True)
class ScopeTimes:
    compute: float
    ici: float
    host: float

    @property
    def exposed_ici(self) -> float:
        return max(0.0, self.ici - self.compute)

    @property
    def exposed_host(self) -> float:
        return max(0.0, self.host - max(self.compute, self.ici))

    @property
    def total(self) -> float:
        return max(self.compute, self.ici, self.host)


def scope_times(scope: Scope, model: Hardware) -> ScopeTimes:
    """One run of a computation, in seconds, before overlap and calibration (its transfers across
    slices are the DCN term's)."""
    return ScopeTimes(
        compute=math.fsum(
            (
                scope.matmul_flops / model.matmul_flops_per_second,
                scope.kernel_flops / model.kernel_flops_per_second,
                scope.memory_bytes / model.memory_bytes_per_second,
                scope.reduce_bytes / model.reduce_bytes_per_second,
                scope.slice_bytes / model.slice_bytes_per_second,
            )
        ),
        ici=scope.ici_bytes / model.ici_bytes_per_second,
        host=scope.host_bytes / model.host_bytes_per_second,
    )


def raw_step_seconds(profile: StepProfile, hardware: Hardware) -> float:
    """The step before calibration and without the DCN term: each computation as long as its
    longest engine."""
    return math.fsum(scope.runs * scope_times(scope, hardware).total for scope in profile.scopes)


def ici_share(profile: StepProfile, hardware: Hardware) -> float:
    """The step's ICI time over its compute time: what the model hides entirely while it is
    below 1, and what a real step partly waits for."""
    compute = math.fsum(scope.runs * scope_times(scope, hardware).compute for scope in profile.scopes)
    ici = math.fsum(scope.runs * scope_times(scope, hardware).ici for scope in profile.scopes)
    return ici / compute if compute else math.inf


def predict(
    profile: StepProfile,
    model: Hardware,
    *,
    overhead: float,
    tokens_per_chip: float,
    model_flops_per_chip: float,
    dcn_seconds: float = 0.0,
) -> Prediction:
    """The predicted step for one chip: `tokens_per_chip` tokens per step, `model_flops_per_chip`
    of the model's FLOPs per step (for MFU), everything but the DCN term (`dcn_seconds`) scaled
    by the calibrated `overhead`."""
    compute = ici = host = 0.0
    for scope in profile.scopes:
        times = scope_times(scope, model)
        compute += scope.runs * times.compute
        ici += scope.runs * times.exposed_ici
        host += scope.runs * times.exposed_host
    parts = [overhead * compute, overhead * ici, dcn_seconds, overhead * host]
    step = math.fsum(parts)
    if step <= 0:
        raise ValueError("the compiled step has no work the model can time")
    return Prediction(
        step_seconds=step,
        compute_seconds=parts[0],
        exposed_ici_seconds=parts[1],
        exposed_dcn_seconds=parts[2],
        exposed_host_seconds=parts[3],
        tokens_per_second_per_chip=tokens_per_chip / step,
        mfu=model_flops_per_chip / (step * model.peak_flops),
    )


def fitted_overhead(raw_seconds: dict[str, float], published_seconds: dict[str, float]) -> float:
    """The one calibration constant: the geometric mean of published over uncalibrated predicted
    step times, so the anchors' errors balance in ratio."""
    ratios = [published_seconds[name] / raw_seconds[name] for name in published_seconds]
    return math.exp(math.fsum(math.log(r) for r in ratios) / len(ratios))
