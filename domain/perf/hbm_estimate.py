"""Where the analytic memory estimate's two working-set constants come from: the compiler's
per-chip HBM on the configurations recorded in hbm_estimate_points.json (measured by
benchmarks/hbm_estimate_points.py), fitted by least squares, and the table of the estimate's
error on each that docs/capacity.md shows.

The estimate's state term (weights and AdamW moments) models the compiled step's arguments; the
rest of it (gradients, saved activations, logits and the working set) models everything else
the compiler places, its temporaries and outputs less what they alias: the compiler's total
minus its arguments. The two constants are fitted to that, and only to that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from domain.perf.capacity import (
    GIB,
    WORKING_SET_ACTIVATION_FACTOR,
    WORKING_SET_FP32_CAST_FACTOR,
    MemoryEstimate,
    estimate_memory,
    working_set_units,
)
from domain.perf.fit_results import fit_check_job
from domain.perf.published_recipes import Compiled
from domain.training.job import JobSpec
from domain.training.presets import preset

POINTS_FILE = Path(__file__).with_name("hbm_estimate_points.json")
# The constants in domain/perf/capacity.py are the fit rounded to this many decimals.
FACTOR_DECIMALS = 2
# docs/capacity.md holds error_table() between these lines (tests/test_capacity.py compares).
BEGIN, END = "<!-- hbm-estimate-table -->", "<!-- /hbm-estimate-table -->"
TABLE_HEADER = (
    "| configuration | compiler arguments + temporaries = total (GiB) | estimate (GiB) | error (GiB) |\n"
    "| --- | --- | --- | --- |"
)


@dataclass(frozen=True)
class Point:
    name: str
    preset: str
    slices: int
    topology: str
    overrides: Mapping[str, str]
    compiled: Compiled | None  # None: not measured yet


@dataclass(frozen=True)
class WorkingSetFit:
    activation_factor: float
    fp32_cast_factor: float

    @property
    def rounded(self) -> tuple[float, float]:
        """The constants as domain/perf/capacity.py declares them."""
        return round(self.activation_factor, FACTOR_DECIMALS), round(self.fp32_cast_factor, FACTOR_DECIMALS)


def load_points(text: str | None = None) -> list[Point]:
    data = json.loads(POINTS_FILE.read_text() if text is None else text)
    points = []
    for entry in data["points"]:
        compiled = entry.get("compiled")
        points.append(
            Point(
                name=entry["name"],
                preset=entry["preset"],
                slices=int(entry["slices"]),
                topology=entry["topology"],
                overrides={str(k): str(v) for k, v in entry["overrides"].items()},
                compiled=None if compiled is None else Compiled.from_json(compiled),
            )
        )
    return points


def job_of(point: Point) -> JobSpec:
    """The job the fit check compiles for the point, as `python -m trainer.fit_check` resolves it."""
    return fit_check_job(point.preset, slices=point.slices, topology=point.topology, overrides=point.overrides)


def _chips_per_slice(point: Point) -> int:
    return preset(point.preset).accelerator.shape(point.topology).chips


def estimate_of(point: Point) -> MemoryEstimate:
    """The analytic estimate of the point, with the constants domain/perf/capacity.py declares, as
    the memory policies compute it for the same job."""
    return estimate_memory(
        job_of(point).maxtext_overrides, chips_per_slice=_chips_per_slice(point), slices=point.slices
    )


def _measured(points: Sequence[Point]) -> list[tuple[Point, Compiled]]:
    missing = [point.name for point in points if point.compiled is None]
    if missing:
        raise ValueError(
            f"not measured: {', '.join(missing)}; run `python -m benchmarks.hbm_estimate_points` to compile them"
        )
    return [(point, point.compiled) for point in points if point.compiled is not None]


def fit_working_set(points: Sequence[Point]) -> WorkingSetFit:
    """The two working-set constants that minimise the squared error of the estimate's
    non-state terms against the compiler's total minus arguments, over `points`.

    Per point: temporaries - (gradients + saved activations + logits) = a x activations + c x
    cast, a linear least-squares problem in (a, c) without intercept, solved by its 2 x 2 normal
    equations. Raises ValueError when the points cannot determine both (for example, no point
    stores its weights wider than its activations)."""
    saa = sac = scc = say = scy = 0.0
    for point, compiled in _measured(points):
        overrides = job_of(point).maxtext_overrides
        chips = _chips_per_slice(point)
        estimate = estimate_memory(overrides, chips_per_slice=chips, slices=point.slices)
        fixed = estimate.gradients_gib + estimate.saved_activations_gib + estimate.logits_gib
        activations, cast = (
            units / GIB for units in working_set_units(overrides, chips_per_slice=chips, slices=point.slices)
        )
        rest = compiled.beyond_arguments_gib - fixed
        saa += activations * activations
        sac += activations * cast
        scc += cast * cast
        say += activations * rest
        scy += cast * rest
    determinant = saa * scc - sac * sac
    if determinant <= 1e-9 * max(saa * scc, 1e-300):
        raise ValueError(
            "the points do not determine both working-set constants: they need configurations "
            "with float32 weights and with bfloat16 weights, at more than one batch size"
        )
    return WorkingSetFit(
        activation_factor=(say * scc - scy * sac) / determinant,
        fp32_cast_factor=(scy * saa - say * sac) / determinant,
    )


def declared_factors() -> tuple[float, float]:
    """The constants domain/perf/capacity.py estimates with."""
    return WORKING_SET_ACTIVATION_FACTOR, WORKING_SET_FP32_CAST_FACTOR


@dataclass(frozen=True)
class TableRow:
    point: Point
    compiled: Compiled
    estimate_gib: float

    @property
    def error_gib(self) -> float:
        return self.estimate_gib - self.compiled.sizes_gib()[1]


def table_rows(points: Sequence[Point]) -> list[TableRow]:
    return [
        TableRow(point=point, compiled=compiled, estimate_gib=estimate_of(point).total_gib)
        for point, compiled in _measured(points)
    ]


def max_error_gib(points: Sequence[Point]) -> float:
    return max(abs(row.error_gib) for row in table_rows(points))


def error_table(points: Sequence[Point]) -> str:
    """The markdown table docs/capacity.md shows: per point, the compiler's arguments +
    temporaries = total, the estimate and its error (estimate - total), in GiB."""
    lines = [TABLE_HEADER]
    for row in table_rows(points):
        argument, total = (round(size, 2) for size in row.compiled.sizes_gib())
        refused = "" if row.compiled.fits else " (does not fit)"
        lines.append(
            f"| {row.point.name}{refused} | {argument:.2f} + {total - argument:.2f} = {total:.2f} "
            f"| {row.estimate_gib:.2f} | {row.error_gib:+.2f} |"
        )
    return "\n".join(lines)
