"""The analytic capacity estimate: parameter counts, per-chip memory, FLOPs and cost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.capacity import (
    cost_per_hour,
    estimate_memory,
    job_cost,
    model_shape,
    train_flops_per_step,
)
from domain.presets import PROCEDURE_OVERRIDES, maxtext_overrides, preset
from domain.tpu_catalog import accelerator

V6E = accelerator("v6e")


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


@settings(max_examples=40, deadline=None)
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


@settings(max_examples=20, deadline=None)
@given(model=st.sampled_from(["llama3-8b", "llama3-70b"]), slices=st.integers(min_value=1, max_value=4))
def test_bf16_halves_weight_bytes(model, slices):
    fp32 = estimate_memory(overrides(model, slices, weight_dtype="float32"), chips_per_slice=16, slices=slices)
    bf16 = estimate_memory(overrides(model, slices, weight_dtype="bfloat16"), chips_per_slice=16, slices=slices)
    assert bf16.state_gib == pytest.approx(fp32.state_gib / 2)


def test_flops_per_step_is_six_per_parameter_per_token_plus_attention():
    o = overrides("llama3-8b")
    tokens = 4 * 4096 * 32
    flops = train_flops_per_step(o, chips=32)
    assert 6 * model_shape(o).params * tokens < flops < 1.2 * 6 * model_shape(o).params * tokens


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
