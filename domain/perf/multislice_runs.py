"""The published multislice scaling runs (domain/perf/multislice_runs.json) as the DCN term's
scaling points, the term fitted on them, and its error band: every number derived from the file,
never typed in. `python -m benchmarks.multislice` prints the held-out table and, with `--compile`,
records the compiles again after a MaxText or libtpu upgrade.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from domain.perf.dcn import CrossSliceTraffic, DcnBand, DcnTerm, ScalingPoint, fit, held_out_errors
from domain.perf.published_recipes import PublishedRun, published_runs
from domain.tpu.tpu_catalog import accelerator

RUNS_FILE = Path(__file__).with_name("multislice_runs.json")
# The DCN axis every scaling point is data parallel over (MaxText's dcn_data_parallelism).
CHECKED_AXIS = "data"


@dataclass(frozen=True)
class ScalingCompile:
    """What the compile on N slices says crosses slices per chip per step, and MaxText's count of
    the step's FLOPs per chip."""

    traffic: CrossSliceTraffic
    model_flops_per_chip: float | None

    @classmethod
    def from_json(cls, slices: int, data: Mapping[str, Any]) -> ScalingCompile:
        return cls(
            CrossSliceTraffic(slices, data["bytes"], data["transfers"], data["ring_steps"]),
            data.get("model_flops_per_chip"),
        )


@dataclass(frozen=True)
class V5eSeries:
    """One model of MaxText's v5e table: its settings as published, per-chip MFU on 1 to 32
    slices of v5e-256, and the compiles here."""

    name: str
    source: str
    slice_type: str
    tuning_params: Mapping[str, Any]
    libtpu_init_args: str
    mfu_percent: Mapping[int, float]
    compiled: Mapping[int, ScalingCompile]

    @property
    def generation(self) -> str:
        return self.slice_type.split("-")[0]

    def points(self) -> list[ScalingPoint]:
        acc = accelerator(self.generation)
        flops = next((c.model_flops_per_chip for c in self.compiled.values() if c.model_flops_per_chip), None)
        if flops is None or acc.dcn_bytes_per_second_per_chip is None:
            return []
        one = self.mfu_percent[1]
        one_slice_seconds = flops / (one / 100 * acc.peak_bf16_tflops_per_chip * 1e12)
        return [
            ScalingPoint(
                model=self.name,
                generation=self.generation,
                slices=slices,
                one_slice_seconds=one_slice_seconds,
                published_slowdown_percent=100 * (mfu / one - 1),
                traffic=self.compiled[slices].traffic,
                line_bytes_per_second=acc.dcn_bytes_per_second_per_chip,
            )
            for slices, mfu in sorted(self.mfu_percent.items())
            if slices > 1 and slices in self.compiled
        ]


@dataclass(frozen=True)
class RecipeSeries:
    """Published Trillium recipes of one model on 1, 2, ... slices (tpu_recipes_v6e.json)."""

    name: str
    recipes: Mapping[int, str]
    compiled: Mapping[int, ScalingCompile]

    def runs(self) -> dict[int, PublishedRun]:
        by_recipe = {run.recipe: run for run in published_runs()}
        return {slices: by_recipe[recipe] for slices, recipe in self.recipes.items()}

    def points(self) -> list[ScalingPoint]:
        runs = self.runs()
        one = runs[1].published_step_seconds
        line = accelerator("v6e").dcn_bytes_per_second_per_chip
        if line is None:
            return []
        return [
            ScalingPoint(
                model=self.name,
                generation="v6e",
                slices=slices,
                one_slice_seconds=one,
                published_slowdown_percent=100 * (one / run.published_step_seconds - 1),
                traffic=self.compiled[slices].traffic,
                line_bytes_per_second=line,
            )
            for slices, run in sorted(runs.items())
            if slices > 1 and slices in self.compiled
        ]


@dataclass(frozen=True)
class RecipeCheck:
    """A published multislice recipe with no one-slice run beside it: checked as a whole step,
    from its compile in the published-runs table."""

    name: str
    recipe: str
    slices: int

    def run(self) -> PublishedRun:
        return next(run for run in published_runs() if run.recipe == self.recipe and run.slices == self.slices)


def _compiled(data: Mapping[str, Any]) -> dict[int, ScalingCompile]:
    return {int(slices): ScalingCompile.from_json(int(slices), entry) for slices, entry in data.items()}


@dataclass(frozen=True)
class MultisliceRuns:
    v5e: tuple[V5eSeries, ...]
    v6e: tuple[RecipeSeries, ...]
    checks: tuple[RecipeCheck, ...]

    def points(self) -> list[ScalingPoint]:
        return [point for series in self.v5e for point in series.points()]

    def trillium_points(self) -> list[ScalingPoint]:
        return [point for series in self.v6e for point in series.points()]


def load(text: str) -> MultisliceRuns:
    data = json.loads(text)
    v5e = tuple(
        V5eSeries(
            name=entry["name"],
            source=f"{entry['source']['repository']} {entry['source']['path']} at {entry['source']['commit'][:7]}",
            slice_type=entry["slice_type"],
            tuning_params=MappingProxyType(dict(entry["tuning_params"])),
            libtpu_init_args=entry["libtpu_init_args"],
            mfu_percent=MappingProxyType({p["slices"]: p["mfu_percent"] for p in entry["points"]}),
            compiled=MappingProxyType(_compiled(entry.get("compiled_here") or {})),
        )
        for entry in data["v5e_series"]
    )
    v6e = tuple(
        RecipeSeries(
            name=entry["name"],
            recipes=MappingProxyType({int(k): v for k, v in entry["recipes"].items()}),
            compiled=MappingProxyType(_compiled(entry.get("compiled_here") or {})),
        )
        for entry in data["v6e_series"]
    )
    checks = tuple(
        RecipeCheck(name=entry["name"], recipe=entry["recipe"], slices=entry["slices"]) for entry in data["v6e_checks"]
    )
    return MultisliceRuns(v5e, v6e, checks)


@cache
def multislice_runs() -> MultisliceRuns:
    return load(RUNS_FILE.read_text())


@cache
def dcn_term() -> DcnTerm | None:
    """The term the product predicts with: fitted on every published scaling point, both
    generations' (None before any compile is recorded)."""
    runs = multislice_runs()
    points = runs.points() + runs.trillium_points()
    return fit(points) if points else None


@cache
def dcn_bands() -> Mapping[str, DcnBand]:
    """Per DCN axis, how far the held-out slowdowns were off: each v5e model from a fit on the
    others, the Trillium points from a fit on all of v5e."""
    runs = multislice_runs()
    points = runs.points()
    errors = [error.model_error for error in held_out_errors(points, extra=runs.trillium_points())] if points else []
    data = DcnBand(CHECKED_AXIS, len(errors), min(errors) if errors else None, max(errors) if errors else None)
    return MappingProxyType({CHECKED_AXIS: data})


def dcn_band(axis: str) -> DcnBand:
    """The band for a job whose slices are split along MaxText's `dcn_<axis>_parallelism`."""
    return dcn_bands().get(axis) or DcnBand.unchecked(axis)
