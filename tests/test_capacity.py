"""The analytic capacity estimate: parameter counts, per-chip memory, FLOPs and cost."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.config.settings import settings_cost
from domain.perf.capacity import (
    GIB,
    LLAMA_FORMULA,
    WORKING_SET_ACTIVATION_FACTOR,
    WORKING_SET_FP32_CAST_FACTOR,
    cost_per_hour,
    estimate_memory,
    job_cost,
    llama_formula_flops,
    model_shape,
    stack_cost,
    working_set_units,
)
from domain.perf.hbm_estimate import (
    BEGIN,
    END,
    Compiled,
    Point,
    error_table,
    estimate_of,
    fit_working_set,
    job_of,
    load_points,
    max_error_gib,
)
from domain.tpu.tpu_catalog import RESERVATION_ASSUMPTION, accelerator
from domain.training.presets import PROCEDURE_OVERRIDES, maxtext_overrides, preset
from tests.support.cli_settings import infra_settings

V6E = accelerator("v6e")
CAPACITY_DOC = Path(__file__).parents[1] / "docs" / "capacity.md"


def overrides(name: str, slices: int = 2, **extra) -> dict:
    return {**maxtext_overrides(preset(name), slices), **{k: str(v) for k, v in extra.items()}}


def test_llama3_parameter_counts():
    assert model_shape(overrides("llama3-8b")).params == pytest.approx(8.03e9, rel=0.005)
    assert model_shape(overrides("llama3-70b")).params == pytest.approx(70.55e9, rel=0.005)


def test_state_matches_the_compilers_arguments():
    """The compiled step's arguments are exactly weights + AdamW moments, sharded."""
    assert estimate_memory(overrides("llama3-70b"), chips_per_slice=16, slices=2).state_gib == pytest.approx(
        12.32, abs=0.01
    )
    assert estimate_memory(overrides("llama3-8b"), chips_per_slice=16, slices=2).state_gib == pytest.approx(
        5.61, abs=0.01
    )


def test_the_procedures_70b_job_is_clearly_over_and_the_preset_is_under():
    procedure = {**overrides("llama3-70b"), **PROCEDURE_OVERRIDES["llama3-70b"]}
    assert estimate_memory(procedure, chips_per_slice=16, slices=2).total_gib > 1.5 * V6E.usable_hbm_gib
    assert estimate_memory(overrides("llama3-70b"), chips_per_slice=16, slices=2).total_gib < V6E.usable_hbm_gib


def test_unmodelled_remat_policy_says_so():
    with pytest.raises(ValueError, match="remat_policy = 'minimal' is not modelled"):
        estimate_memory(overrides("llama3-8b", remat_policy="minimal"), chips_per_slice=16, slices=2)


@settings(max_examples=40)
@given(
    model=st.sampled_from(["llama3-8b", "llama3-70b"]),
    slices=st.integers(min_value=1, max_value=8),
    more=st.integers(min_value=1, max_value=8),
)
def test_more_chips_never_raise_per_chip_state(model, slices, more):
    """Adding slices (sharded across them by FSDP) never adds per-chip state."""

    def state(count):
        return estimate_memory(
            overrides(model, count, dcn_fsdp_parallelism=count, dcn_data_parallelism=1),
            chips_per_slice=16,
            slices=count,
        ).state_gib

    assert state(slices + more) <= state(slices)


@settings(max_examples=20)
@given(model=st.sampled_from(["llama3-8b", "llama3-70b"]), slices=st.integers(min_value=1, max_value=4))
def test_bf16_halves_weight_bytes(model, slices):
    fp32 = estimate_memory(overrides(model, slices, weight_dtype="float32"), chips_per_slice=16, slices=slices)
    bf16 = estimate_memory(overrides(model, slices, weight_dtype="bfloat16"), chips_per_slice=16, slices=slices)
    assert bf16.state_gib == pytest.approx(fp32.state_gib / 2)


# --- Where the working set's constants come from: the recorded compiles ---------------------


def test_the_working_set_constants_are_the_fit_of_the_recorded_compiles():
    """The constants in domain/perf/capacity.py are the least-squares fit of the compiles recorded in
    domain/perf/hbm_estimate_points.json: re-measure (python -m benchmarks.hbm_estimate_points) and
    paste its rounded fit when they differ."""
    assert fit_working_set(load_points()).rounded == (WORKING_SET_ACTIVATION_FACTOR, WORKING_SET_FP32_CAST_FACTOR)


def recorded_like(point: Point, *, activation: float, cast: float, argument_gib: float) -> Point:
    """`point` as if the compiler had placed exactly the estimate's terms with these constants
    as temporaries, beside `argument_gib` of arguments."""
    job = job_of(point)
    chips = preset(point.preset).accelerator.shape(point.topology).chips
    estimate = estimate_memory(job.maxtext_overrides, chips_per_slice=chips, slices=point.slices)
    a_units, c_units = working_set_units(job.maxtext_overrides, chips_per_slice=chips, slices=point.slices)
    temporaries = (
        estimate.gradients_gib
        + estimate.saved_activations_gib
        + estimate.logits_gib
        + (activation * a_units + cast * c_units) / GIB
    )
    total = argument_gib + temporaries
    return replace(
        point,
        compiled=Compiled(
            fits=True, total_gib=total, argument_gib=argument_gib, temp_gib=temporaries, output_gib=0.0, alias_gib=0.0
        ),
    )


def test_the_fit_recovers_the_constants_the_temporaries_were_made_with_whatever_the_arguments():
    """Fitted on the compiler's temporaries (total minus arguments), never on its total: the
    procedure's 70B figure the compiler calls 'temporaries' is the total, arguments included."""
    points = load_points()
    arguments = [3.0, 40.0, 0.5, 17.0, 9.0, 25.0, 1.0]
    made = [
        recorded_like(point, activation=2.25, cast=1.5, argument_gib=arguments[index % len(arguments)])
        for index, point in enumerate(points)
    ]
    fit = fit_working_set(made)
    assert fit.activation_factor == pytest.approx(2.25, rel=1e-9)
    assert fit.fp32_cast_factor == pytest.approx(1.5, rel=1e-9)
    assert fit.rounded == (2.25, 1.5)


def test_the_fit_minimises_the_squared_error():
    """Moving either constant off the fit raises the sum of squared errors on the recorded points."""
    points = load_points()
    fit = fit_working_set(points)

    def squared_error(activation: float, cast: float) -> float:
        total = 0.0
        for point in points:
            job = job_of(point)
            chips = preset(point.preset).accelerator.shape(point.topology).chips
            estimate = estimate_memory(job.maxtext_overrides, chips_per_slice=chips, slices=point.slices)
            a_units, c_units = working_set_units(job.maxtext_overrides, chips_per_slice=chips, slices=point.slices)
            rest = estimate.gradients_gib + estimate.saved_activations_gib + estimate.logits_gib
            modelled = rest + (activation * a_units + cast * c_units) / GIB
            total += (modelled - point.compiled.beyond_arguments_gib) ** 2
        return total

    best = squared_error(fit.activation_factor, fit.fp32_cast_factor)
    for da, dc in ((0.05, 0), (-0.05, 0), (0, 0.05), (0, -0.05)):
        assert squared_error(fit.activation_factor + da, fit.fp32_cast_factor + dc) > best


def test_points_that_cannot_determine_both_constants_are_refused():
    bf16_only = [point for point in load_points() if job_of(point).maxtext_overrides.get("weight_dtype") == "bfloat16"]
    assert bf16_only
    with pytest.raises(ValueError, match="do not determine both working-set constants"):
        fit_working_set(bf16_only)
    unmeasured = [replace(point, compiled=None) for point in load_points()[:2]]
    with pytest.raises(ValueError, match=r"not measured: .*python -m benchmarks\.hbm_estimate_points"):
        fit_working_set(unmeasured)


def test_the_recorded_points_are_the_presets_and_the_procedures_jobs():
    """The fit covers what the policies judge: each preset as shipped and each procedure's job."""
    points = load_points()
    for name in ("llama3-8b", "llama3-70b"):
        assert any(p.preset == name and not p.overrides for p in points), name
        assert any(p.preset == name and p.overrides == PROCEDURE_OVERRIDES[name] for p in points), name
    assert all(p.compiled is not None for p in points)


def test_the_state_term_is_the_compilers_arguments_on_every_recorded_point():
    for point in load_points():
        assert estimate_of(point).state_gib == pytest.approx(point.compiled.argument_gib, abs=0.02), point.name


def test_the_estimate_is_within_its_stated_error_of_every_recorded_compile():
    """The memory policies call the estimate off by up to about 5 GiB (policies/rules/rayjob.py):
    it is, on every recorded configuration (fitted to the totals as temporaries it was off by
    up to 25 GiB; dividing logits and q/k/v by tensor parallelism, by up to 9.8 GiB)."""
    assert max_error_gib(load_points()) < 5.0


def test_tensor_parallelism_splits_the_state_but_not_the_activations_per_chip():
    """MaxText splits the batch over data and FSDP only: with tensor parallelism 4 a chip holds
    4 x per_device_batch_size sequences with the vocabulary and heads split 4 ways, the same
    logits and saved q/k/v bytes as FSDP 16 (measured: 1.8 GiB more in all, not 3.9 less)."""
    fsdp = estimate_memory(overrides("llama3-8b"), chips_per_slice=16, slices=2)
    tensor = estimate_memory(
        overrides("llama3-8b", ici_fsdp_parallelism=4, ici_tensor_parallelism=4), chips_per_slice=16, slices=2
    )
    assert tensor.logits_gib == fsdp.logits_gib == pytest.approx(4 * 4096 * 128256 * 2 / GIB)
    assert tensor.saved_activations_gib == fsdp.saved_activations_gib
    assert tensor.state_gib == fsdp.state_gib  # 16 shards either way


def test_docs_capacity_shows_the_error_table_of_the_recorded_compiles():
    """docs/capacity.md's table of the estimate's error is error_table() of the recorded data:
    paste `python -m benchmarks.hbm_estimate_points --report`'s table between the markers."""
    text = CAPACITY_DOC.read_text()
    assert BEGIN in text and END in text, f"docs/capacity.md has no {BEGIN} ... {END} table"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert block == error_table(load_points())


def test_the_fallback_flops_are_six_per_parameter_per_token_plus_attention_and_say_so():
    o = overrides("llama3-8b")
    tokens = 4 * 4096 * 32
    flops = llama_formula_flops(o, chips=32, fallback_reason="no trainer environment")
    assert 6 * model_shape(o).params * tokens < flops.per_step < 1.2 * 6 * model_shape(o).params * tokens
    assert (flops.tokens_per_step, flops.tokens_per_chip, flops.source) == (tokens, 4 * 4096, LLAMA_FORMULA)
    assert flops.described.startswith("the Llama formula (") and flops.described.endswith(": no trainer environment")
    # Gradient accumulation runs that many micro-batches in one step, as MaxText counts it.
    accumulated = llama_formula_flops({**o, "gradient_accumulation_steps": "2"}, chips=32)
    assert (accumulated.per_step, accumulated.tokens_per_step) == (2 * flops.per_step, 2 * tokens)


def test_hourly_cost_of_the_default_stack():
    assert cost_per_hour(32, V6E.price_per_chip_hour_usd).dollars_per_hour == 86.40


def test_job_cost_from_flops_and_an_assumed_mfu():
    estimate = job_cost(
        flops_per_step=1e15,
        steps=3600,
        chips=10,
        peak_tflops_per_chip=100,
        assumed_mfu=0.5,
        price_per_chip_hour_usd=2.0,
    )
    assert estimate.step_seconds == pytest.approx(2.0)  # 1e15 / (10 x 100e12 x 0.5)
    assert estimate.job_hours == pytest.approx(2.0)
    assert estimate.job_dollars == pytest.approx(40.0)
    with pytest.raises(ValueError, match=r"assumed MFU = 1\.5"):
        job_cost(flops_per_step=1, steps=1, chips=1, peak_tflops_per_chip=1, assumed_mfu=1.5, price_per_chip_hour_usd=1)


# --- What a stack costs while it trains and while it waits ----------------------------------

US_EAST5 = {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"}


def default_stack_cost(**config):
    """The cost of the shipped default stack (2 slices of v6e-16) with `config` on top."""
    return settings_cost(infra_settings({**US_EAST5, **config}))


def test_the_default_stack_trains_at_list_price_and_costs_nothing_idle():
    cost = default_stack_cost()
    assert (cost.capacity, cost.training_chips, cost.idle_chips) == ("on-demand", 32, 0)
    assert cost.price_per_chip_hour == 2.70
    assert cost.training_dollars_per_hour == 86.40
    assert (cost.idle_dollars_per_hour, cost.idle_dollars_per_day) == (0.0, 0.0)


def test_slices_kept_up_while_idle_are_paid_every_hour_of_the_day():
    """Before issue 20 every slice stayed up: 32 chips x $2.70 x 24 h."""
    all_up = default_stack_cost(minSlices="2")
    assert (all_up.idle_chips, all_up.idle_dollars_per_hour, all_up.idle_dollars_per_day) == (32, 86.40, 2073.60)
    one_up = default_stack_cost(minSlices="1")
    assert (one_up.idle_chips, one_up.idle_dollars_per_hour, one_up.idle_dollars_per_day) == (16, 43.20, 1036.80)
    assert one_up.training_dollars_per_hour == all_up.training_dollars_per_hour == 86.40


def test_spot_is_priced_at_the_regions_spot_price():
    cost = default_stack_cost(capacity="spot")
    assert cost.price_per_chip_hour == 1.08  # v6e Spot in us-east5
    assert cost.training_dollars_per_hour == 34.56
    assert "spot in us-east5 at $1.08 per chip-hour" in cost.basis and "skypilot-catalog" in cost.basis


def test_the_price_is_the_regions():
    """v6e on demand costs more outside the US: europe-west4's price, not the US one."""
    cost = default_stack_cost(**{"gcp:region": "europe-west4", "gcp:zone": "europe-west4-a"})
    assert cost.price_per_chip_hour == 2.97
    assert cost.training_dollars_per_hour == 95.04


def test_a_reservation_is_costed_at_on_demand_and_says_so():
    cost = default_stack_cost(capacity="reservation", reservation="my-reservation")
    assert cost.price_per_chip_hour == 2.70 and cost.training_dollars_per_hour == 86.40
    assert cost.basis.endswith(RESERVATION_ASSUMPTION)


def test_flex_start_has_no_dollar_figure_unless_the_price_is_set():
    cost = default_stack_cost(capacity="flex-start")
    assert cost.price is None and cost.price_per_chip_hour is None
    assert cost.training_dollars_per_hour is None
    # Scaled to zero while idle: nothing is up, so that much is known.
    assert (cost.idle_dollars_per_hour, cost.idle_dollars_per_day) == (0.0, 0.0)
    assert cost.basis == (
        "no dollar figure: the catalog (domain/tpu/tpu_catalog.py) has no flex-start list price for TPU v6e in "
        "us-east5; set pricePerChipHour to what you pay per chip-hour (`pulumi config set pricePerChipHour <dollars>`)"
    )
    priced = default_stack_cost(capacity="flex-start", pricePerChipHour="1.5")
    assert priced.training_dollars_per_hour == 48.0
    assert priced.basis == "flex-start in us-east5 at $1.50 per chip-hour (the pricePerChipHour setting)"


def test_price_per_chip_hour_overrides_the_first_choices_price():
    cost = default_stack_cost(capacity="spot", pricePerChipHour="0.5", minSlices="1")
    assert cost.price_per_chip_hour == 0.5
    assert (cost.training_dollars_per_hour, cost.idle_dollars_per_hour, cost.idle_dollars_per_day) == (16.0, 8.0, 192.0)


def test_a_region_without_a_price_gives_no_figure():
    """southamerica-west1 offers v6e (TPU_ZONES) but the price source has no row for it there."""
    cost = stack_cost(
        accelerator=V6E, region="southamerica-west1", capacity="on-demand", chips_per_slice=16, slices=2, min_slices=1
    )
    assert cost.training_dollars_per_hour is None and cost.idle_dollars_per_day is None
    assert "no on-demand list price for TPU v6e in southamerica-west1" in cost.basis


def test_min_slices_beyond_slices_is_refused():
    with pytest.raises(ValueError, match=r"min_slices = 3 must be within 0..slices \(2\)"):
        stack_cost(accelerator=V6E, region="us-east5", capacity="on-demand", chips_per_slice=16, slices=2, min_slices=3)


def test_the_idle_cost_table_comes_from_the_cost_model():
    """benchmarks/idle_cost.py: the README's table, before and after scale to zero."""
    from benchmarks.idle_cost import table

    lines = table("dev").splitlines()
    assert "| before: every slice always up (minSlices 2) | $86.40 | $86.40 | $2,073.60 |" in lines
    assert "| after: the default, scale to zero (minSlices 0) | $86.40 | $0.00 | $0.00 |" in lines
    assert "| capacity spot, scale to zero | $34.56 | $0.00 | $0.00 |" in lines
    assert "| capacity flex-start, scale to zero | no figure (set pricePerChipHour) | $0.00 | $0.00 |" in lines
    assert "TPU chips only: 32 chips, 2 slices of v6e-16, in us-east5. Priced at:" in lines


def test_a_price_whose_day_no_number_holds_is_refused():
    """32 chips x 5e306 fits a float; a day of it (x 24) does not, and would export inf."""
    with pytest.raises(
        ValueError, match=r"pricePerChipHour = 5e\+306 is out of range: times the stack's 32 chips and 24"
    ):
        stack_cost(
            accelerator=V6E,
            region="us-east5",
            capacity="on-demand",
            chips_per_slice=16,
            slices=2,
            min_slices=0,
            price_override=5e306,
        )
