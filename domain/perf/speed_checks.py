"""How good the speed model is on published runs, derived from the runs themselves: each run's
error, a constant-MFU baseline to beat, the mean absolute error of the runs held out of
calibration, and whether the model ranks the runs a user chooses between as they were measured.
docs/capacity.md prints these (`python -m benchmarks.speed_report`); tests hold it to them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from domain.perf.published_recipes import PublishedRun, model_family
from domain.perf.speed_anchors import anchor
from domain.perf.step_time import Anchor, SpeedModel
from domain.training.presets import Preset


@dataclass(frozen=True)
class RunCheck:
    """One published run against the model's prediction and the constant-MFU baseline's."""

    run: PublishedRun
    anchor: Anchor
    predicted_step_seconds: float
    baseline_step_seconds: float
    tokens_per_chip: float

    @property
    def error_percent(self) -> float:
        return 100 * (self.predicted_step_seconds / self.run.published_step_seconds - 1)

    @property
    def baseline_error_percent(self) -> float:
        return 100 * (self.baseline_step_seconds / self.run.published_step_seconds - 1)

    @property
    def held_out(self) -> bool:
        return not self.anchor.calibrated

    @property
    def as_published(self) -> bool:
        """Compiled with the recipe's own settings (not changed so that it fits)."""
        return not self.anchor.changed

    @property
    def published_tokens_per_second(self) -> float:
        return self.tokens_per_chip / self.run.published_step_seconds

    @property
    def predicted_tokens_per_second(self) -> float:
        return self.tokens_per_chip / self.predicted_step_seconds


def constant_mfu(model: SpeedModel, runs: Sequence[PublishedRun]) -> float:
    """The baseline: one MFU for every run, fitted like the model's overhead (the geometric mean
    over the calibrating runs), on MaxText's count of each run's FLOPs here."""
    mfus = []
    for run in runs:
        compiled = run.predicted_from
        if run.calibrates and compiled is not None and compiled.model_flops_per_chip:
            mfus.append(compiled.model_flops_per_chip / (run.published_step_seconds * model.hardware.peak_flops))
    if not mfus:
        raise ValueError("no calibrating run with a FLOPs count: the baseline has nothing to fit")
    return math.exp(math.fsum(math.log(mfu) for mfu in mfus) / len(mfus))


def run_checks(model: SpeedModel, runs: Sequence[PublishedRun]) -> list[RunCheck]:
    """Every run that compiles here with a profile and a FLOPs count, checked."""
    mfu = constant_mfu(model, runs)
    checks = []
    for run in runs:
        found, compiled = anchor(run), run.predicted_from
        if found is None or compiled is None or not compiled.model_flops_per_chip or not compiled.tokens_per_chip:
            continue
        checks.append(
            RunCheck(
                run=run,
                anchor=found,
                predicted_step_seconds=model.predicted_step_seconds(found),
                baseline_step_seconds=compiled.model_flops_per_chip / (mfu * model.hardware.peak_flops),
                tokens_per_chip=compiled.tokens_per_chip,
            )
        )
    return checks


def mean_absolute(values: Sequence[float]) -> float:
    return math.fsum(abs(value) for value in values) / len(values)


@dataclass(frozen=True)
class RankedPair:
    """Two published runs of one model that differ only in what a user chooses (batch, slice
    shape and count, remat): which gives more tokens per second per chip, measured and predicted."""

    first: RunCheck
    second: RunCheck

    @property
    def published_first_faster(self) -> bool:
        return self.first.published_tokens_per_second > self.second.published_tokens_per_second

    @property
    def predicted_first_faster(self) -> bool:
        return self.first.predicted_tokens_per_second > self.second.predicted_tokens_per_second

    @property
    def agrees(self) -> bool:
        return self.published_first_faster == self.predicted_first_faster

    @property
    def published_gap_percent(self) -> float:
        """How far apart the two were measured, per chip (positive: the first was faster)."""
        return 100 * (self.first.published_tokens_per_second / self.second.published_tokens_per_second - 1)


def comparable_pairs(checks: Sequence[RunCheck]) -> list[RankedPair]:
    """Pairs of runs of one model with the same settings and flags but for batch, slices and remat."""

    def same_job(check: RunCheck) -> tuple[object, ...]:
        run = check.run
        return (run.model_type, tuple(sorted(run.layout().items())), run.libtpu_init_args)

    return [RankedPair(a, b) for a, b in combinations(checks, 2) if same_job(a) == same_job(b)]


def model_size(model_name: str) -> str:
    """`llama3.1-70b` -> `70b`: with the family, which model a name is."""
    return model_name.rsplit("-", 1)[-1]


@dataclass(frozen=True)
class PresetFooting:
    """A shipped preset's predicted MFU beside a published run of the same model, predicted by
    the same model from its compile here (both on MaxText's FLOPs count)."""

    preset: str
    preset_mfu: float
    recipe: RunCheck
    peak_flops: float

    @property
    def recipe_predicted_mfu(self) -> float:
        compiled = self.recipe.run.predicted_from
        assert compiled is not None and compiled.model_flops_per_chip
        return compiled.model_flops_per_chip / (self.recipe.predicted_step_seconds * self.peak_flops)

    @property
    def recipe_measured_mfu(self) -> float:
        """The published step time on today's count of its FLOPs: what the recipe achieved,
        counted as the preset's figure is (MaxText's count has changed since the recipe logged
        its own TFLOP/s)."""
        compiled = self.recipe.run.predicted_from
        assert compiled is not None and compiled.model_flops_per_chip
        return compiled.model_flops_per_chip / (self.recipe.run.published_step_seconds * self.peak_flops)

    @property
    def preset_at_least_as_efficient(self) -> bool:
        return round(self.preset_mfu, 3) >= round(self.recipe_predicted_mfu, 3)


def preset_footing(model: SpeedModel, checks: Sequence[RunCheck], presets: Mapping[str, Preset]) -> list[PresetFooting]:
    rows = []
    for preset in presets.values():
        model_name = preset.maxtext_overrides.get("model_name", "")
        if preset.predicted_mfu is None:
            continue
        for found in checks:
            run_model = found.run.model_type or ""
            same = model_family(run_model) == model_family(model_name) and model_size(run_model) == model_size(
                model_name
            )
            if same and found.as_published:
                rows.append(PresetFooting(preset.name, preset.predicted_mfu, found, model.hardware.peak_flops))
    return rows
