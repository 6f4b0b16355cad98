"""The speed model against MaxText's published v6e runs (domain/perf/tpu_recipes_v6e.json): how each
is compiled here, the model family each belongs to, the error band a prediction carries, the
held-out check against a constant MFU, and the ranking of runs a user chooses between. Pure: the
compiles are recorded data (a `fitcheck` test in tests/test_fit_check.py compiles one again)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import speed_report
from domain.perf.hlo_profile import Scope, StepProfile
from domain.perf.published_recipes import (
    OUT_PROJ_RECOMPUTED,
    RECIPES_FILE,
    Compiled,
    PublishedRun,
    compile_spec,
    load,
    model_family,
    published_runs,
)
from domain.perf.speed_anchors import SPEED_MODELS
from domain.perf.speed_checks import RankedPair, RunCheck, comparable_pairs, constant_mfu, mean_absolute, run_checks
from domain.perf.step_time import Anchor, ErrorBand, SpeedModel
from domain.training.maxtext_config import base_config
from domain.training.presets import PRESETS
from tests.support.anchors import CALIBRATING_8B
from trainer import fit_check

CAPACITY = Path(__file__).parents[1] / "docs" / "capacity.md"
MODEL = SPEED_MODELS["v6e"]
BASE = base_config()


def run_named(name: str) -> PublishedRun:
    [found] = [run for run in published_runs() if run.name == name]
    return found


@pytest.mark.parametrize(
    ("model_name", "family"),
    [
        ("llama3.1-8b", "llama3"),
        ("llama3-70b", "llama3"),
        ("llama3.3-70b", "llama3"),
        ("llama3.1-405b", "llama3"),
        ("llama2-70b", "llama2"),
        ("mixtral-8x7b", "mixtral"),
        ("gemma3-12b", "gemma3"),
        ("gpt3-175b", "gpt3"),
        ("qwen3-30b-a3b", "qwen3"),
        ("mistral-7b", "mistral"),
    ],
)
def test_a_model_name_belongs_to_its_family(model_name, family):
    assert model_family(model_name) == family


def test_every_published_run_is_unique_and_every_compiled_one_has_what_the_model_reads():
    runs = published_runs()
    assert len({run.name for run in runs}) == len(runs) >= 20
    assert {run.name for run in runs if run.calibrates} == {
        CALIBRATING_8B,
        "llama3_1_70b_8192_bs2_bfloat16_no_collective_matmul (1 x v6e-32)",
    }
    for run in runs:
        for compiled in (run.compiled, run.compiled_changed):
            if compiled is not None and compiled.fits:
                assert compiled.profile and compiled.profile.scopes, run.name
                assert compiled.tokens_per_chip and compiled.model_flops_per_chip, run.name
    # Runs of at least two families besides Llama 3 are anchors: the bands are measured, not assumed.
    assert {anchor.family for anchor in MODEL.anchors} >= {"llama3", "gpt3", "gemma3", "mixtral"}


def test_a_recipe_is_compiled_with_its_own_settings_on_maxtexts_defaults():
    run = run_named(CALIBRATING_8B)
    preset = PRESETS["llama3-70b"]
    spec = compile_spec(run, preset="llama3-70b", preset_overrides=preset.maxtext_overrides, base=BASE)
    assert (spec.preset, spec.topology, spec.slices) == ("llama3-70b", "4x4", 1)
    overrides = spec.overrides
    # The recipe's settings, its -1 (auto) FSDP axis made the slice's 16 chips.
    assert overrides["model_name"] == "llama3.1-8b" and overrides["ici_fsdp_parallelism"] == "16"
    assert overrides["per_device_batch_size"] == "3" and overrides["out_proj"] == "offload"
    assert overrides["sa_use_fused_bwd_kernel"] == "true"  # booleans as MaxText reads them
    # The preset's own choices undone where the recipe is silent: MaxText's default instead.
    assert overrides["weight_dtype"] == "float32"
    assert (overrides["dcn_data_parallelism"], overrides["dcn_fsdp_parallelism"]) == ("1", "1")
    # The recipe's data settings are not taken (its tokenizer is a file of its own checkout).
    assert overrides["dataset_type"] == "synthetic" and "tokenizer_path" not in overrides
    # The recipe's flags, less the one libtpu does not know; the collective-matmul switch kept.
    assert "--xla_jf_spmd_threshold_for_windowed_einsum_mib=1000000" in spec.extra_flags.split()
    assert "--2a886c8_chip_config_name" not in spec.extra_flags
    assert "--2a886c8_chip_config_name=megachip_tccontrol" in run.libtpu_init_args
    changed = compile_spec(
        run, preset="llama3-70b", preset_overrides=preset.maxtext_overrides, base=BASE, changed=OUT_PROJ_RECOMPUTED
    )
    assert changed.overrides["out_proj"] == "remat"


def test_slices_are_data_parallel_unless_the_recipe_shards_across_them():
    preset = PRESETS["llama3-70b"]
    [gemma_2x] = [r for r in published_runs() if r.family == "gemma3" and r.slices == 2]
    [llama_405b] = [r for r in published_runs() if r.model_type == "llama3.1-405b"]
    spec = compile_spec(gemma_2x, preset="llama3-70b", preset_overrides=preset.maxtext_overrides, base=BASE)
    assert (spec.overrides["dcn_data_parallelism"], spec.overrides["dcn_fsdp_parallelism"]) == ("2", "1")
    assert spec.overrides["ici_fsdp_transpose_parallelism"] == "256"
    spec = compile_spec(llama_405b, preset="llama3-70b", preset_overrides=preset.maxtext_overrides, base=BASE)
    assert (spec.overrides["dcn_data_parallelism"], spec.overrides["dcn_fsdp_parallelism"]) == ("1", "2")


def test_the_fit_checks_job_of_a_published_run_passes_the_jobs_own_checks():
    for run in published_runs():
        if run.compiled is not None:
            job, flags = fit_check.published_job(run)
            assert job.slices == run.slices and fit_check.configuration(job, flags)["slice_type"] == run.slice_type


def anchor(name: str, family: str, published: float, calibrated: bool, raw: float) -> Anchor:
    """An anchor whose uncalibrated prediction is `raw` seconds (all matmul, at 1 FLOP/s)."""
    return Anchor(name, family, published, calibrated, StepProfile((Scope("entry", runs=1, matmul_flops=raw),)))


def toy_model(*anchors: Anchor) -> SpeedModel:
    from tests.support.tiny_step import TOY_HARDWARE as HARDWARE

    return SpeedModel(HARDWARE, anchors)


def test_the_band_is_the_spread_of_the_familys_errors_and_a_family_without_runs_is_uncalibrated():
    # Matmuls at 100 FLOP/s: raw seconds are FLOPs / 100. Overhead 1 (one calibrating anchor, exact).
    model = toy_model(
        anchor("a", "llama3", 2.0, True, 200.0),
        anchor("b", "llama3", 2.5, False, 200.0),  # predicted 2.0: -20%
        anchor("c", "gpt3", 1.0, False, 110.0),  # predicted 1.1: +10%
    )
    assert model.overhead == pytest.approx(1.0)
    llama = model.band("llama3")
    assert llama.calibrated and llama.anchors == ("a", "b")
    assert (llama.low_percent, llama.high_percent) == pytest.approx((-20.0, 0.0))
    gpt3 = model.band("gpt3")
    assert not gpt3.calibrated and gpt3.low_percent == gpt3.high_percent == pytest.approx(10.0)
    gemma = model.band("gemma3")
    assert gemma.anchors == () and gemma.low_percent is None and gemma.step_range(1.0) is None
    # A prediction 20% fast means the run takes 1.25 times as long.
    assert llama.step_range(2.0) == pytest.approx((2.0, 2.5))
    assert "calibrated on the llama3 family" in llama.describe(2.0)
    assert "2.000 to 2.500 s" in llama.describe(2.0)
    assert "outside the calibrated family" in gpt3.describe(1.1) and "+10.0% to +10.0%" in gpt3.describe(1.1)
    assert gemma.describe(1.0).startswith("uncalibrated: no published gemma3 run checks the model")


def fit_result(model_name: str) -> fit_check.FitResult:
    run = run_named(CALIBRATING_8B)
    compiled = run.compiled
    return fit_check.FitResult(
        fits=True,
        slice_type="v6e-16",
        slices=1,
        chips=16,
        usable_gib=31.24,
        total_gib=20.0,
        argument_gib=5.0,
        temp_gib=15.0,
        output_gib=5.0,
        alias_gib=5.0,
        generation="v6e",
        tokens_per_chip=compiled.tokens_per_chip,
        model_flops_per_chip=compiled.model_flops_per_chip,
        model_flops_source="maxtext",
        profile=compiled.profile.to_json(),
        configuration={"maxtext": {"model_name": model_name}},
    )


@pytest.mark.parametrize(
    ("model_name", "says"),
    [
        ("llama3-8b", "calibrated on the llama3 family: error on"),
        ("gemma3-12b", "outside the calibrated family: error on 1 published gemma3 run"),
        ("deepseek3-671b", "uncalibrated: no published deepseek3 run checks the model"),
    ],
)
def test_the_fit_check_never_prints_a_bare_prediction_and_its_json_carries_the_band(model_name, says):
    result = fit_result(model_name)
    report = result.report()
    assert says in report
    assert f"calibrated on: {', '.join(MODEL.calibrated_on)}" in report
    band = json.loads(result.to_json())["prediction"]["band"]
    assert band["family"] == model_family(model_name)
    expected = MODEL.band(model_family(model_name))
    assert (band["low_percent"], band["high_percent"], band["calibrated"]) == (
        expected.low_percent,
        expected.high_percent,
        expected.calibrated,
    )
    # Read back, the result predicts the same band.
    assert fit_check.FitResult.from_json(result.to_json()).prediction.band == expected


def check(name: str, published: float, predicted: float, tokens: float, *, changed=None) -> RunCheck:
    run = PublishedRun(
        recipe=name,
        source="",
        model_type="m",
        slice_type="v6e-16",
        slices=1,
        tuning_params={},
        libtpu_init_args="",
        published_step_seconds=published,
        published_tflops_per_device=1.0,
        calibrates=False,
        compiled=None,
        compiled_changed=None,
    )
    found = Anchor(name, "m", published, False, StepProfile(), changed=changed or {})
    return RunCheck(run, found, predicted, published, tokens)


def test_a_pair_agrees_when_the_model_puts_the_faster_run_first():
    fast, slow = check("fast", 1.0, 1.2, 100.0), check("slow", 2.0, 1.9, 100.0)
    assert RankedPair(fast, slow).agrees and RankedPair(fast, slow).published_gap_percent == pytest.approx(100.0)
    swapped = check("slow", 2.0, 1.1, 100.0)  # predicted faster than `fast`
    assert not RankedPair(fast, swapped).agrees
    # Per chip and per token: a run with twice the tokens in twice the time is as fast.
    assert RankedPair(check("a", 1.0, 1.0, 100.0), check("b", 2.0, 1.9, 200.0)).predicted_first_faster is False


def test_only_runs_that_differ_in_batch_slices_or_remat_are_ranked():
    checks = run_checks(MODEL, published_runs())
    pairs = comparable_pairs(checks)
    assert pairs
    for pair in pairs:
        first, second = pair.first.run, pair.second.run
        assert first.model_type == second.model_type and first.libtpu_init_args == second.libtpu_init_args
        assert first.layout() == second.layout()
    names = {(pair.first.run.name, pair.second.run.name) for pair in pairs}
    # The 70B runs on v6e-32 (bf16 weights, collective matmul off) and v6e-64 are another job.
    assert not any("v6e-32" in a and "70b_8192_bs2 (" in b for a, b in names)


def test_the_held_out_error_and_the_baseline_are_what_the_runs_give():
    checks = run_checks(MODEL, published_runs())
    mfu = constant_mfu(MODEL, published_runs())
    for found in checks:
        compiled = found.run.predicted_from
        assert found.predicted_step_seconds == MODEL.predicted_step_seconds(found.anchor)
        assert found.baseline_step_seconds == pytest.approx(compiled.model_flops_per_chip / (mfu * 918e12))
    # The baseline is exact on average over what it is fitted on, as the overhead is.
    calibrating = [c for c in checks if not c.held_out]
    assert sum(c.baseline_error_percent for c in calibrating) == pytest.approx(0.0, abs=1.0)
    assert mean_absolute([-1.0, 3.0]) == 2.0


def test_docs_capacity_prints_the_speed_report_of_the_recorded_data():
    """The tables in docs/capacity.md are this data's: regenerate them with
    `python -m benchmarks.speed_report` after re-recording."""
    text = CAPACITY.read_text()
    assert speed_report.BEGIN in text and speed_report.END in text
    block = text.split(speed_report.BEGIN, 1)[1].split(speed_report.END, 1)[0].strip()
    assert block == speed_report.report()


def test_recorded_compiles_read_back_as_they_were_written():
    text = RECIPES_FILE.read_text()
    assert load(text) == published_runs()
    compiled = Compiled.from_json({"fits": False, "total_gib": 32.92})
    assert compiled.profile is None and dict(compiled.changed) == {}


def test_an_error_band_of_no_runs_has_no_range():
    assert ErrorBand("x", False, (), None, None).step_range(1.0) is None


def test_what_docs_capacity_says_of_the_70b_v6e_64_run_and_of_maxtexts_flops_count():
    """The 70B v6e-64 run, predicted fast: with every second of its ICI exposed, the prediction
    is 18.4 s against the published 18.688 s. MaxText 0.2.5 counts 0.889 of the FLOPs the 8B
    recipes logged, and 0.933 of the 70B ones'."""
    from domain.perf.step_time import ici_share, raw_step_seconds

    run = run_named("llama3_1_70b_8192_bs2 (1 x v6e-64)")
    found = next(a for a in MODEL.anchors if a.name == run.name)
    compute_and_exposed = MODEL.predicted_step_seconds(found)
    ici = ici_share(found.profile, MODEL.hardware) * (
        raw_step_seconds(found.profile, MODEL.hardware)  # all compute: no ICI is exposed in the model
    )
    assert round(compute_and_exposed + MODEL.overhead * ici, 1) == 18.4 and run.published_step_seconds == 18.688
    capacity = CAPACITY.read_text()
    assert "(18.4 s against\n    18.69 s;" in capacity or "18.4 s against 18.69 s" in capacity.replace("\n    ", " ")
    for model_type, ratio in (("llama3.1-8b", 0.889), ("llama3.1-70b", 0.933)):
        for published in (r for r in published_runs() if r.model_type == model_type and r.predicted_from):
            theirs = published.published_tflops_per_device * 1e12 * published.published_step_seconds
            assert round(published.predicted_from.model_flops_per_chip / theirs, 3) == ratio, published.name
        assert f"{ratio}" in capacity


def test_what_docs_fit_check_says_of_the_prediction_is_what_the_data_gives():
    readme = " ".join((Path(__file__).parents[1] / "docs" / "fit-check.md").read_text().split())
    checks = run_checks(MODEL, published_runs())
    held_out = [c for c in checks if c.held_out]
    as_published = [c for c in held_out if c.as_published]
    llama3 = [c for c in held_out if c.anchor.family == "llama3"]
    band = MODEL.band("llama3")
    families = {c.anchor.family for c in checks}
    assert (
        f"({len(held_out)} held out, {['no', 'one', 'two', 'three', 'four', 'five', 'six'][len(families)]} model families)"
        in readme
    )
    assert (
        f"Llama 3: {band.low_percent:+.1f}% to {band.high_percent:+.1f}% over {len(band.anchors)} published runs"
        in readme
    )
    assert (
        f"within Llama 3 its mean absolute error is {mean_absolute([c.error_percent for c in llama3]):.1f}% against "
        f"{mean_absolute([c.baseline_error_percent for c in llama3]):.1f}% for a constant MFU" in readme
    )
    assert (
        f"({mean_absolute([c.error_percent for c in as_published]):.1f}% against "
        f"{mean_absolute([c.baseline_error_percent for c in as_published]):.1f}%)" in readme
    )
    # The example report in the README is the 8B preset's band, around its step with the DCN term.
    low, high = band.step_range(2.679)
    assert (
        f"error on {len(band.anchors)} published llama3 runs {band.low_percent:+.1f}% to {band.high_percent:+.1f}%"
        in readme
    )
    assert f"so {low:.3f} to {high:.3f} s" in readme
