"""Presets: the procedure's job overrides, sized so parallelism matches the slices."""

import math

import pytest

from domain.training.presets import PRESETS, PROCEDURE_OVERRIDES, maxtext_overrides, preset
from tests.support.presets import ALL_PRESETS


def test_8b_keeps_the_procedure_job_but_shards_with_fsdp_only():
    overrides = maxtext_overrides(preset("llama3-8b"), slices=2)
    assert overrides["model_name"] == "llama3-8b"
    assert (overrides["per_device_batch_size"], overrides["max_target_length"]) == ("4", "4096")
    assert (overrides["ici_fsdp_parallelism"], overrides["ici_tensor_parallelism"]) == ("16", "1")
    assert overrides["dcn_data_parallelism"] == "2"


def test_70b_shards_fsdp_across_slices_with_bf16_state_and_offloaded_remat():
    overrides = maxtext_overrides(preset("llama3-70b"), slices=2)
    assert overrides["dcn_fsdp_parallelism"] == "2"
    assert overrides["dcn_data_parallelism"] == "1"
    assert overrides["weight_dtype"] == "bfloat16"
    assert (overrides["remat_policy"], overrides["decoder_layer_input"]) == ("custom", "offload")


def test_procedure_overrides_restore_the_procedure_job():
    procedure = {**maxtext_overrides(preset("llama3-70b"), slices=2), **PROCEDURE_OVERRIDES["llama3-70b"]}
    assert (procedure["weight_dtype"], procedure["remat_policy"]) == ("float32", "full")
    assert procedure["per_device_batch_size"] == "2" and procedure["ici_tensor_parallelism"] == "4"


def test_dcn_axis_follows_the_slice_count():
    assert maxtext_overrides(preset("llama3-70b"), slices=4)["dcn_fsdp_parallelism"] == "4"
    assert maxtext_overrides(preset("llama3-8b"), slices=1)["dcn_data_parallelism"] == "1"


@pytest.mark.parametrize("name", [name for name, p in PRESETS.items() if p.runs_on_tpu])
def test_ici_parallelism_fills_one_slice(name):
    chosen = preset(name)
    ici = [int(value) for key, value in chosen.maxtext_overrides.items() if key.startswith("ici_")]
    assert math.prod(ici) == chosen.slice_shape.chips


def test_tiny_preset_runs_on_cpu():
    tiny = preset("tiny-cpu")
    assert not tiny.runs_on_tpu
    assert tiny.maxtext_overrides["hardware"] == "cpu"
    assert "dcn_data_parallelism" not in maxtext_overrides(tiny, slices=1)
    with pytest.raises(ValueError, match="runs on CPU"):
        _ = tiny.accelerator


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ValueError) as caught:
        preset("llama3-405b")
    assert str(caught.value) == f"unknown preset 'llama3-405b'; valid presets: {ALL_PRESETS}"
