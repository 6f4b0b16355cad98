"""The speed model against every published v6e run, as docs/capacity.md prints it between its
`speed-report` markers (tests/test_speed_checks.py holds the page to this output):

    .venv/bin/python -m benchmarks.speed_report

Reads only recorded data (domain/perf/tpu_recipes_v6e.json): no compile. Re-record the data first with
`python -m benchmarks.published_recipes` after a MaxText or libtpu upgrade.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.perf.published_recipes import PublishedRun, published_runs
from domain.perf.speed_anchors import speed_model
from domain.perf.speed_checks import (
    PresetFooting,
    RankedPair,
    RunCheck,
    comparable_pairs,
    constant_mfu,
    mean_absolute,
    preset_footing,
    run_checks,
)
from domain.perf.step_time import SpeedModel, ici_share
from domain.training.presets import PRESETS

BEGIN, END = "<!-- speed-report -->", "<!-- /speed-report -->"


def _fits(run: PublishedRun) -> str:
    if run.compiled is None:
        return "not compiled: the README quotes no MaxText settings"
    if run.compiled.fits:
        return f"yes, {run.compiled.total_gib:.2f} GiB"
    refused = f"no, {run.compiled.total_gib:.2f} GiB" if run.compiled.total_gib is not None else "no"
    changed = run.compiled_changed
    if changed is not None and changed.fits:
        settings = ", ".join(f"{key}={value}" for key, value in changed.changed.items())
        return f"{refused}; with {settings}: yes, {changed.total_gib:.2f} GiB"
    return refused


def _role(check: RunCheck | None) -> str:
    if check is None:
        return ""
    if not check.held_out:
        return "calibrate"
    return "held out" if check.as_published else "held out (changed)"


def _slices(run: PublishedRun) -> str:
    return f"{run.slices} x {run.slice_type}"


def runs_table(model: SpeedModel, runs: Sequence[PublishedRun], checks: Sequence[RunCheck]) -> list[str]:
    by_run = {check.run.name: check for check in checks}
    lines = [
        "| published run (MaxText benchmark) | slices | family | published s/step | predicted | error "
        "| constant MFU | its error | fits here? | used to |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for run in runs:
        check = by_run.get(run.name)
        figures = (
            f"{check.predicted_step_seconds:.3f} | {check.error_percent:+.1f}% | "
            f"{check.baseline_step_seconds:.3f} | {check.baseline_error_percent:+.1f}%"
            if check
            else "| | |"
        )
        lines.append(
            f"| `{run.recipe}` | {_slices(run)} | {run.family or '-'} | {run.published_step_seconds:.3f} | {figures} "
            f"| {_fits(run)} | {_role(check)} |"
        )
    return lines


def summary(model: SpeedModel, runs: Sequence[PublishedRun], checks: Sequence[RunCheck]) -> list[str]:
    held_out = [check for check in checks if check.held_out]
    as_published = [check for check in held_out if check.as_published]
    lines = [
        f"Overhead {model.overhead:.3f}; constant-MFU baseline {100 * constant_mfu(model, runs):.1f}% "
        "(both fitted on the calibrating runs).",
        "",
        "| held-out runs | count | model's mean absolute error | constant MFU's |",
        "| --- | ---: | ---: | ---: |",
    ]
    groups = [("compiled as published", as_published), ("all, changed ones included", held_out)]
    families = sorted({check.anchor.family for check in checks})
    groups += [(f"{family} only", [c for c in held_out if c.anchor.family == family]) for family in families]
    for label, group in groups:
        if group:
            lines.append(
                f"| {label} | {len(group)} | {mean_absolute([c.error_percent for c in group]):.1f}% | "
                f"{mean_absolute([c.baseline_error_percent for c in group]):.1f}% |"
            )
    lines += [
        "",
        "| family | published runs compared | error band | what the fit check says |",
        "| --- | ---: | --- | --- |",
    ]
    for family in families:
        band = model.band(family)
        kind = "calibrated family" if band.calibrated else "outside the calibrated family, with this band"
        lines.append(
            f"| {family} | {len(band.anchors)} | {band.low_percent:+.1f}% to {band.high_percent:+.1f}% | {kind} |"
        )
    lines.append("| any other | 0 | none | uncalibrated |")
    return lines


def _pair_row(model: SpeedModel, pair: RankedPair) -> str:
    def label(check: RunCheck) -> str:
        changed = " (changed)" if not check.as_published else ""
        return f"{_slices(check.run)} b{check.run.tuning_params.get('per_device_batch_size')}{changed}"

    def measured(check: RunCheck) -> str:
        share = ici_share(check.anchor.profile, model.hardware)
        return f"{label(check)} ({check.published_tokens_per_second:,.0f}; {share:.2f})"

    first, second = pair.first, pair.second
    published = label(first if pair.published_first_faster else second)
    predicted = label(first if pair.predicted_first_faster else second)
    agrees = "yes" if pair.agrees else "**no**"
    return (
        f"| {first.run.model_type} | {measured(first)}, {measured(second)} | {published} | {predicted} "
        f"| {abs(pair.published_gap_percent):.1f}% | {agrees} |"
    )


def ranking(model: SpeedModel, checks: Sequence[RunCheck]) -> list[str]:
    header = (
        "| model | runs (tokens/s per chip published; ICI over compute in the model) | measured faster "
        "| predicted faster | gap measured | agrees |"
    )
    return [header, "| --- | --- | --- | --- | ---: | --- |", *(_pair_row(model, p) for p in comparable_pairs(checks))]


def _footing_row(row: PresetFooting) -> str:
    run = row.recipe.run
    efficient = "yes" if row.preset_at_least_as_efficient else "**no**"
    return (
        f"| `{row.preset}` ({100 * row.preset_mfu:.1f}%) | `{run.recipe}` {_slices(run)} | "
        f"{100 * row.recipe_predicted_mfu:.1f}% | {100 * row.recipe_measured_mfu:.1f}% | "
        f"{100 * run.published_mfu:.1f}% | {efficient} |"
    )


def presets(model: SpeedModel, checks: Sequence[RunCheck]) -> list[str]:
    header = (
        "| preset (predicted MFU on its slices, DCN term included) | published run of the same model "
        "| its MFU, predicted here "
        "| measured, on today's FLOPs count | as it logged it | preset as efficient, predicted? |"
    )
    rows = (_footing_row(row) for row in preset_footing(model, checks, PRESETS))
    return [header, "| --- | --- | ---: | ---: | ---: | --- |", *rows]


def report() -> str:
    model = speed_model("v6e")
    assert model is not None
    runs = published_runs()
    checks = run_checks(model, runs)
    sections = [
        runs_table(model, runs, checks),
        summary(model, runs, checks),
        ranking(model, checks),
        presets(model, checks),
    ]
    return "\n\n".join("\n".join(section) for section in sections)


def main() -> None:
    print(BEGIN)
    print(report())
    print(END)


if __name__ == "__main__":
    main()
