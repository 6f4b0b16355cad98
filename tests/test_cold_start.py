"""What a start from zero costs before the first step (domain/perf/cold_start.py), and the
workloads stack's outputs of it: exact arithmetic on the declared published figures."""

from __future__ import annotations

import dataclasses
import os

import pytest

from domain.perf import cold_start, fit_results
from domain.perf.cold_start import cold_start_cost
from tests.support.workloads_program import job_of, recorded_fit_check, run_workloads
from trainer import fit_check


def test_a_start_from_zero_with_a_measured_compile_costs_each_phase_exactly():
    # 32 chips at $2.70 an hour: $0.024 a second.
    cost = cold_start_cost(chips=32, price_per_chip_hour_usd=2.70, compile_seconds=600.0, compile_basis="measured")
    by_phase = {phase.phase: phase for phase in cost.phases}
    assert [phase.phase for phase in cost.phases] == ["node_boot", "image_pull", "compile"]
    assert (by_phase["node_boot"].cold_seconds, by_phase["node_boot"].warm_seconds) == (270.0, 270.0)
    assert (by_phase["node_boot"].cold_dollars, by_phase["node_boot"].warm_dollars) == (6.48, 6.48)
    assert (by_phase["image_pull"].cold_seconds, by_phase["image_pull"].warm_seconds) == (191.0, 30.0)
    assert (by_phase["image_pull"].cold_dollars, by_phase["image_pull"].warm_dollars) == (4.58, 0.72)
    # Warm: 600 s x 97 / 190 = 306.3 s.
    assert (by_phase["compile"].cold_seconds, by_phase["compile"].warm_seconds) == (600.0, 306.3)
    assert (by_phase["compile"].cold_dollars, by_phase["compile"].warm_dollars) == (14.4, 7.35)
    assert (cost.cold_seconds, cost.warm_seconds) == (1061.0, 606.3)
    assert (cost.cold_dollars, cost.warm_dollars) == (25.46, 14.55)
    assert cost.unknown == ()


def test_without_a_measured_compile_the_compile_is_unknown_and_left_out_of_the_sums():
    cost = cold_start_cost(chips=16, price_per_chip_hour_usd=1.08, compile_seconds=None, compile_basis="not measured")
    [compile_phase] = [phase for phase in cost.phases if phase.phase == "compile"]
    assert compile_phase.cold_seconds is None and compile_phase.cold_dollars is None
    assert compile_phase.basis == "not measured"
    assert (cost.cold_seconds, cost.warm_seconds) == (461.0, 300.0)
    # 16 chips at $1.08 an hour: $0.0048 a second.
    assert (cost.cold_dollars, cost.warm_dollars) == (2.21, 1.44)
    assert cost.unknown == ("compile",)
    assert "without compile, unknown: not measured" in cost.basis()


def test_without_a_price_the_seconds_stand_and_the_dollars_are_none():
    cost = cold_start_cost(chips=32, price_per_chip_hour_usd=None, compile_seconds=100.0, compile_basis="measured")
    assert cost.cold_seconds == 561.0 and cost.cold_dollars is None and cost.warm_dollars is None
    assert all(phase.cold_dollars is None for phase in cost.phases)


@pytest.mark.parametrize(
    "chips, compile_seconds, said",
    [(0, None, "chips = 0"), (32, -1.0, "compile_seconds = -1.0")],
)
def test_impossible_inputs_are_refused_by_name(chips, compile_seconds, said):
    with pytest.raises(ValueError, match=said):
        cold_start_cost(chips=chips, price_per_chip_hour_usd=2.7, compile_seconds=compile_seconds, compile_basis="x")


def test_every_figure_names_its_source_and_what_makes_it_an_assumption():
    figures = [value for value in vars(cold_start).values() if isinstance(value, cold_start.PublishedFigure)]
    assert len(figures) == 5
    for figure in figures:
        assert figure.seconds > 0 and figure.source and figure.assumption.startswith("assumed")
    assert cold_start.WARM_COMPILE_FRACTION == pytest.approx(97 / 190)


def test_only_a_whole_compile_gives_the_compile_phase_a_figure():
    result = fit_results.FitResult(fits=True, slice_type="v6e-16", slices=2, chips=32, usable_gib=31.24)
    stopped = dataclasses.replace(result, compile_seconds=21.0, compiled_through=fit_results.BUFFER_ASSIGNMENT)
    whole = dataclasses.replace(result, compile_seconds=612.0, compiled_through=fit_results.CODE_GENERATION)
    assert stopped.full_compile_seconds is None and whole.full_compile_seconds == 612.0
    assert "compiler time on this machine: 21 s (to buffer assignment)" in stopped.report()
    assert "compiler time on this machine: 612 s (the whole compile)" in whole.report()
    assert fit_results.FitResult.from_json(whole.to_json()).compile_seconds == 612.0


def test_the_compile_is_timed_from_the_train_steps_first_dump(tmp_path):
    assert fit_check.compile_seconds(tmp_path, 1000.0) is None
    first = tmp_path / "module_0001.jit_train_step.before_optimizations.txt"
    first.write_text("HloModule")
    os.utime(first, (900.0, 900.0))
    other = tmp_path / "module_0002.jit_other.before_optimizations.txt"
    other.write_text("HloModule")
    os.utime(other, (100.0, 100.0))  # another module's dump does not count
    assert fit_check.compile_seconds(tmp_path, 1012.34) == 112.3


def test_the_workloads_stack_exports_the_cold_start_cost():
    outputs = run_workloads("dev")[0].outputs
    # Default stack: 2 x v6e-16, 32 chips at $2.70; no fit check here, so no compile figure.
    assert (outputs["coldStartSeconds"], outputs["warmStartSeconds"]) == (461.0, 300.0)
    assert (outputs["coldStartDollars"], outputs["warmStartDollars"]) == (11.06, 7.2)
    phases = {phase["phase"]: phase for phase in outputs["coldStartPhases"]}
    assert phases["compile"]["coldSeconds"] is None
    assert "--full-compile" in phases["compile"]["basis"] and "--full-compile" in outputs["coldStartBasis"]
    assert phases["image_pull"]["warmDollars"] == 0.72


def test_a_whole_compile_of_the_jobs_configuration_gives_the_compile_phase(monkeypatch):
    _, inputs = run_workloads("dev")
    job = job_of(inputs["entrypoint"])
    whole = dataclasses.replace(
        recorded_fit_check(job), compile_seconds=600.0, compiled_through=fit_results.CODE_GENERATION
    )
    fit_results.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    fit_results.result_path(job, fit_results.libtpu_flags(job)).write_text(whole.to_json())
    outputs = run_workloads("dev")[0].outputs
    assert (outputs["coldStartSeconds"], outputs["warmStartSeconds"]) == (1061.0, 606.3)
    assert (outputs["coldStartDollars"], outputs["warmStartDollars"]) == (25.46, 14.55)
    phases = {phase["phase"]: phase for phase in outputs["coldStartPhases"]}
    assert phases["compile"]["basis"].startswith("cold 600 s: the fit check's whole compile")


def test_a_cpu_job_has_no_cold_start_estimate():
    outputs = run_workloads("local")[0].outputs
    assert outputs["coldStartSeconds"] is None and outputs["coldStartPhases"] is None
