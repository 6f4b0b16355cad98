"""What going multislice costs each chip: the time its transfers across slices (over the
data-centre network, DCN) add to a step, read from the compiled multislice step and checked on
published scaling runs (domain/perf/multislice_runs.py).

The fit check's compile with `compile_topology_num_slices=N` lowers every collective that crosses
slices to megascale sends (domain/perf/hlo_profile.py counts, per chip and step, their bytes, how
many there are and their ring steps: 2(N-1) for an all-reduce over N slices). The term is

    DCN seconds = bytes / achieved rate + transfers x seconds per transfer
                  + ring steps x seconds per ring step

and all of it is added to the one-slice step: none of it is taken to overlap compute.

What is fitted (`fit`), what is assumed, and why:
- The achieved rate per chip, never above the generation's line rate (its DCN NICs per host over
  its chips, domain/tpu/tpu_catalog.py), and the two latencies, per transfer and per ring step:
  one value each for every generation (the published runs hold one v6e series only).
- Overlap: none. The compiler schedules these sends asynchronously, but the published slowdowns
  grow with the slice count far more than the bytes do (an all-reduce's bytes per chip approach
  a limit, 2(N-1)/N of the shard), so the latencies carry them. Tried as a fourth number (each
  computation's sends hidden behind a fitted share of its compute), the share came out under 2%
  and no held-out model came within 3 points that was not already.
- What no fit of this form can beat: `least_worst_error` finds the least worst error any choice of
  the three numbers has on given points, a bound `python -m benchmarks.multislice` prints beside
  the fit's errors.

The slowdown is the per-chip throughput change against one slice: one-slice step over N-slice step,
minus one (published MFU ratios measure the same).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.perf.hlo_profile import StepProfile


@dataclass(frozen=True)
class CrossSliceTraffic:
    """What one chip sends across slices in one step on `slices` slices."""

    slices: int
    bytes: float
    transfers: float
    ring_steps: float

    @classmethod
    def of(cls, profile: StepProfile, slices: int) -> CrossSliceTraffic:
        return cls(
            slices=slices,
            bytes=profile.total("dcn_bytes"),
            transfers=profile.total("dcn_transfers"),
            ring_steps=profile.total("dcn_steps"),
        )

    def at(self, slices: int) -> CrossSliceTraffic:
        """The same step on another number of slices, the per-chip shards unchanged (data or FSDP
        parallelism across slices with a fixed per-chip batch): ring steps scale with N-1, and bytes
        with (N-1)/N, as a ring's do; the transfers are the same ones."""
        if slices < 2 or self.slices < 2:
            raise ValueError(f"cross-slice traffic scales between 2 or more slices, not {self.slices} to {slices}")
        share = ((slices - 1) / slices) / ((self.slices - 1) / self.slices)
        return CrossSliceTraffic(
            slices=slices,
            bytes=self.bytes * share,
            transfers=self.transfers,
            ring_steps=self.ring_steps * (slices - 1) / (self.slices - 1),
        )


@dataclass(frozen=True)
class DcnTerm:
    """The three fitted numbers: the rate a chip's cross-slice bytes achieve (never above the
    generation's line rate) and the two latencies."""

    achieved_bytes_per_second: float
    seconds_per_transfer: float
    seconds_per_ring_step: float

    def rate(self, line_bytes_per_second: float) -> float:
        return min(self.achieved_bytes_per_second, line_bytes_per_second)

    def seconds(self, traffic: CrossSliceTraffic, line_bytes_per_second: float) -> float:
        return (
            traffic.bytes / self.rate(line_bytes_per_second)
            + traffic.transfers * self.seconds_per_transfer
            + traffic.ring_steps * self.seconds_per_ring_step
        )


def slowdown_percent(one_slice_seconds: float, extra_seconds: float) -> float:
    """The per-chip throughput change against one slice when a step takes `extra_seconds` more."""
    return -100 * extra_seconds / (one_slice_seconds + extra_seconds)


def extra_seconds(one_slice_seconds: float, slowdown: float) -> float:
    """The inverse of slowdown_percent: the added step time a published change means."""
    return one_slice_seconds * (1 / (1 + slowdown / 100) - 1)


@dataclass(frozen=True)
class ScalingPoint:
    """One published multislice run next to its own one-slice run, and its compile here."""

    model: str  # what the check holds out together: one model's points
    generation: str
    slices: int
    one_slice_seconds: float
    published_slowdown_percent: float
    traffic: CrossSliceTraffic
    line_bytes_per_second: float

    @property
    def name(self) -> str:
        return f"{self.model} on {self.slices}"

    def predicted_slowdown_percent(self, term: DcnTerm) -> float:
        return slowdown_percent(self.one_slice_seconds, term.seconds(self.traffic, self.line_bytes_per_second))


# The achieved rates `fit` tries: 0.1 to 100 GB/s per chip, 1% apart.
RATE_GRID = tuple(1e8 * 1.01**step for step in range(695))


def fit(points: Sequence[ScalingPoint]) -> DcnTerm:
    """The term that best reproduces the points' added step time, relative to each one's
    one-slice step: for each achieved rate on RATE_GRID, the two latencies by least squares
    (neither negative); the rate with the least residual, the lowest of equal ones."""
    if not points:
        raise ValueError("fitting the DCN term needs at least one published multislice run")
    observed = [extra_seconds(p.one_slice_seconds, p.published_slowdown_percent) for p in points]
    best: tuple[float, DcnTerm] | None = None
    for rate in RATE_GRID:
        rows = [
            (
                point.traffic.transfers / point.one_slice_seconds,
                point.traffic.ring_steps / point.one_slice_seconds,
                (extra - point.traffic.bytes / min(rate, point.line_bytes_per_second)) / point.one_slice_seconds,
            )
            for point, extra in zip(points, observed, strict=True)
        ]
        per_transfer, per_step = _latencies(rows)
        residual = math.fsum((a * per_transfer + b * per_step - y) ** 2 for a, b, y in rows)
        # Ties keep the lower rate: above every point's line rate the rate changes nothing (a fit
        # on v5e points alone says nothing of a faster v6e), and the lowest such rate is the one
        # the points show.
        if best is None or residual < best[0] * (1 - 1e-9):
            best = (residual, DcnTerm(rate, per_transfer, per_step))
    assert best is not None
    return best[1]


def _latencies(rows: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """Non-negative least squares in two unknowns: both, else the better of each alone."""
    saa = math.fsum(a * a for a, _, _ in rows)
    sbb = math.fsum(b * b for _, b, _ in rows)
    sab = math.fsum(a * b for a, b, _ in rows)
    say = math.fsum(a * y for a, _, y in rows)
    sby = math.fsum(b * y for _, b, y in rows)
    det = saa * sbb - sab * sab
    if det > 1e-12 * saa * sbb:
        both = ((say * sbb - sby * sab) / det, (sby * saa - say * sab) / det)
        if min(both) >= 0:
            return both
    alone = [(max(0.0, say / saa) if saa else 0.0, 0.0), (0.0, max(0.0, sby / sbb) if sbb else 0.0)]
    return min(alone, key=lambda pair: math.fsum((a * pair[0] + b * pair[1] - y) ** 2 for a, b, y in rows))


def worst_error(term: DcnTerm, points: Sequence[ScalingPoint]) -> float:
    """How far the term's slowdown is off the published one at its worst point, in percentage points."""
    return max(abs(p.predicted_slowdown_percent(term) - p.published_slowdown_percent) for p in points)


# How finely least_worst_error finds its bound, in percentage points.
REACH_TOLERANCE = 0.005
# Every slowdown, published or predicted, lies between 0 and -100%: no error is larger.
LARGEST_ERROR = 100.0


@dataclass(frozen=True)
class Reach:
    """The least worst error, in percentage points, any term can have on some points, and a term
    that has it."""

    worst_error: float
    term: DcnTerm


def least_worst_error(
    points: Sequence[ScalingPoint], *, keeping: Sequence[ScalingPoint] = (), within: float = math.inf
) -> Reach | None:
    """The least worst error that any DcnTerm can have on `points` (every achieved rate, capped at
    each point's line rate as the term caps it, and every pair of latencies, neither negative)
    while it predicts every point of `keeping` within `within` points; None when no term keeps
    them. Not a fit: the bound no fit of this form beats, whatever it is fitted on, found to
    REACH_TOLERANCE by bisection on the error, each step a linear program."""
    if not points:
        raise ValueError("a worst error needs at least one point")
    kept = list(keeping) if math.isfinite(within) else []
    found = _term_within([(list(points), LARGEST_ERROR), (kept, within)])
    if found is None:
        return None
    low, high = 0.0, LARGEST_ERROR
    while high - low > REACH_TOLERANCE:
        middle = (low + high) / 2
        closer = _term_within([(list(points), middle), (kept, within)])
        if closer is None:
            low = middle
        else:
            high, found = middle, closer
    return Reach(high, found)


def _term_within(groups: Sequence[tuple[Sequence[ScalingPoint], float]]) -> DcnTerm | None:
    """A term that predicts every point of each group within that group's error, if there is one.
    With u the inverse of the achieved rate, a point's seconds per byte are max(u, 1 / its line
    rate): linear in (u, both latencies) between consecutive line rates, so one linear program per
    interval. Units (s per GB, ms, us) keep the coefficients near 1 for the solver."""
    from scipy.optimize import linprog  # about a second to import: only where a bound is computed

    inverse_lines = sorted({1e9 / p.line_bytes_per_second for group, _ in groups for p in group})
    highs: list[float | None] = [*inverse_lines, None]
    for low_u, high_u in zip([0.0, *inverse_lines], highs, strict=True):
        rows: list[list[float]] = []
        bounds: list[float] = []
        for group, error in groups:
            for p in group:
                inverse_line = 1e9 / p.line_bytes_per_second
                below_line = inverse_line <= low_u  # the achieved rate is u's, not the line's
                gigabytes = p.traffic.bytes / 1e9
                fixed = 0.0 if below_line else gigabytes * inverse_line
                row = [gigabytes if below_line else 0.0, p.traffic.transfers / 1e3, p.traffic.ring_steps / 1e6]
                slowest = p.published_slowdown_percent - error
                if slowest > -LARGEST_ERROR:
                    rows.append(row)
                    bounds.append(extra_seconds(p.one_slice_seconds, slowest) - fixed)
                fastest = p.published_slowdown_percent + error
                if fastest < 0:
                    rows.append([-value for value in row])
                    bounds.append(fixed - extra_seconds(p.one_slice_seconds, fastest))
        answer = linprog(
            [0.0, 0.0, 0.0],
            A_ub=rows or None,
            b_ub=bounds or None,
            bounds=[(low_u, high_u), (0, None), (0, None)],
            method="highs",
        )
        if answer.status == 0 and answer.x is not None:
            u, per_transfer, per_step = (float(value) for value in answer.x)
            # Below every line's inverse, every point is capped: any rate above the lines is the same.
            rate = 1e9 / max(u, inverse_lines[0])
            return DcnTerm(rate, per_transfer / 1e3, per_step / 1e6)
    return None


@dataclass(frozen=True)
class HeldOutError:
    """One point predicted by a term fitted without its model, and by the two baselines: a
    constant slowdown (the mean of the fitting points) and none at all."""

    point: ScalingPoint
    term: DcnTerm
    constant_percent: float

    @property
    def model_error(self) -> float:
        """Predicted minus published slowdown, in percentage points."""
        return self.point.predicted_slowdown_percent(self.term) - self.point.published_slowdown_percent

    @property
    def constant_error(self) -> float:
        return self.constant_percent - self.point.published_slowdown_percent

    @property
    def zero_error(self) -> float:
        return -self.point.published_slowdown_percent


@dataclass(frozen=True)
class HeldOut:
    """One model's points and the points they are predicted from."""

    model: str
    points: list[ScalingPoint]
    fitting: list[ScalingPoint]


def held_out(points: Sequence[ScalingPoint], *, extra: Sequence[ScalingPoint] = ()) -> list[HeldOut]:
    """Each model's points with every other model's to fit on; `extra` points (another
    generation's), each model's with all of `points`."""
    folds = [
        HeldOut(model, [p for p in points if p.model == model], [p for p in points if p.model != model])
        for model in dict.fromkeys(point.model for point in points)
    ]
    folds += [
        HeldOut(model, [p for p in extra if p.model == model], list(points))
        for model in dict.fromkeys(point.model for point in extra)
    ]
    return folds


def held_out_errors(points: Sequence[ScalingPoint], *, extra: Sequence[ScalingPoint] = ()) -> list[HeldOutError]:
    """Each model's points predicted from a fit on every other model's; `extra` points (another
    generation's) are predicted from a fit on all of `points`."""
    errors = []
    for fold in held_out(points, extra=extra):
        term = fit(fold.fitting)
        constant = math.fsum(p.published_slowdown_percent for p in fold.fitting) / len(fold.fitting)
        errors += [HeldOutError(point, term, constant) for point in fold.points]
    return errors


@dataclass(frozen=True)
class DcnBand:
    """How far the DCN term's held-out slowdowns were off, in percentage points, on published runs
    with one kind of parallelism across slices; none measured for a kind it was not checked on."""

    across_slices: str  # MaxText's DCN axis: "data", "fsdp", ...
    runs: int
    low_points: float | None
    high_points: float | None

    @classmethod
    def unchecked(cls, axis: str) -> DcnBand:
        """The band of an axis no published run checks: uncalibrated."""
        return cls(axis, 0, None, None)

    def describe(self) -> str:
        if self.low_points is None or self.high_points is None:
            return (
                f"uncalibrated: no published run with {self.across_slices} parallelism across slices checks "
                "the DCN term; the figure is not a promise"
            )
        return (
            f"held-out error on {self.runs} published run{'s' if self.runs != 1 else ''} with "
            f"{self.across_slices} parallelism across slices: {self.low_points:+.1f} to {self.high_points:+.1f} "
            "percentage points"
        )


# MaxText's parallelism axes across slices (base.yml's dcn_*_parallelism).
DCN_AXES = ("data", "fsdp", "fsdp_transpose", "sequence", "context", "tensor", "expert", "pipeline", "autoregressive")


def dcn_axis(settings: Mapping[str, Any], slices: int) -> str:
    """Which MaxText axis spans the `slices` (its dcn_<axis>_parallelism is above 1, or -1: the
    rest of them), named as DcnBand names it; several are joined with "+"."""
    spanning = []
    for axis in DCN_AXES:
        value = str(settings.get(f"dcn_{axis}_parallelism", "1")).strip()
        size = slices if value == "-1" else int(value) if value.lstrip("-").isdigit() else 1
        if size > 1:
            spanning.append(axis)
    return "+".join(spanning) or "data"


@dataclass(frozen=True)
class MultisliceCost:
    """A predicted step on several slices: what crossing them adds, against the same step on one
    slice (each chip's work unchanged), and what one slice more would add."""

    slices: int
    axis: str
    one_slice_seconds: float
    dcn_seconds: float
    next_dcn_seconds: float
    band: DcnBand
    # False when the profile was recorded before transfers across slices were counted: its DCN
    # term then has the bytes but not the latencies.
    transfers_counted: bool = True

    @property
    def step_seconds(self) -> float:
        return self.one_slice_seconds + self.dcn_seconds

    @property
    def share(self) -> float:
        """The DCN term's share of the step."""
        return self.dcn_seconds / self.step_seconds

    @property
    def slowdown_percent(self) -> float:
        return slowdown_percent(self.one_slice_seconds, self.dcn_seconds)

    @property
    def next_step_seconds(self) -> float:
        return self.one_slice_seconds + self.next_dcn_seconds

    @property
    def next_slowdown_percent(self) -> float:
        return slowdown_percent(self.one_slice_seconds, self.next_dcn_seconds)

    @property
    def next_token_cost_percent(self) -> float:
        """How much more each token costs on one slice more: a chip's tokens per step stay the
        same, so its dollars per token follow its step time."""
        return 100 * (self.next_step_seconds / self.step_seconds - 1)

    @property
    def not_known(self) -> str | None:
        """Why the term is not known for this compile, or None when it is."""
        if self.transfers_counted:
            return None
        return (
            f"across {self.slices} slices: not known: this compile was recorded before transfers across slices "
            "were counted; rerun the fit check with --no-cache"
        )

    def lines(self) -> list[str]:
        if self.not_known is not None:
            return [self.not_known]
        return [
            f"across {self.slices} slices: DCN {self.dcn_seconds:.3f} s of the step ({100 * self.share:.1f}%), "
            f"per-chip throughput {self.slowdown_percent:+.1f}% against one slice",
            f"  {self.band.describe()}",
            f"on {self.slices + 1} slices: step {self.next_step_seconds:.3f} s, per-chip throughput "
            f"{self.next_slowdown_percent:+.1f}% against one slice, dollars per token "
            f"{self.next_token_cost_percent:+.1f}% against {self.slices}",
        ]
