"""The step-time predictor: reading the compiler's optimized HLO (domain/perf/hlo_text.py,
domain/perf/hlo_profile.py) and turning it into seconds (domain/perf/step_time.py). Pure: a small
module written for these tests in the format libtpu dumps (tests/fixtures/tiny_step.hlo.txt), and
made-up profiles."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.perf import hlo_profile, hlo_text
from domain.perf.hlo_profile import Scope, StepProfile
from domain.perf.speed_anchors import SPEED_MODELS, speed_model
from domain.perf.step_time import fitted_overhead, predict, raw_step_seconds, scope_times
from tests.support.tiny_step import TINY_BUFFERS, TINY_HLO, TOY_HARDWARE


def read(text: str, *, chips_per_slice: int = 4, mxu_width: int = 256) -> StepProfile:
    return hlo_profile.profile(text, chips_per_slice=chips_per_slice, mxu_width=mxu_width)


def test_the_fixtures_profile_multiplies_the_loop_body_by_its_trip_count():
    profile = read(TINY_HLO.read_text())
    scopes = {scope.name: scope for scope in profile.scopes}
    assert set(scopes) == {"main.1_spmd", "body"}
    body, entry = scopes["body"], scopes["main.1_spmd"]
    assert body.runs == 4 and entry.runs == 1  # `i < 4` in the loop's condition
    # bf16[8,128] x bf16[128,100]: 100 output features padded to one 256-wide MXU tile.
    assert body.matmul_flops == 2 * 8 * 256 * 128
    assert body.memory_bytes == 2048 + 2048  # the negate fusion reads and writes bf16[8,128]
    # The broadcast and the convert each read bf16[8,128] and write 4096 bytes of f32.
    assert entry.memory_bytes == 2 * (2048 + 4096) and entry.matmul_flops == 0
    assert entry.reduce_bytes == 4096 + 32  # f32[8,128] in, f32[8] out; the init value is in SMEM
    assert entry.slice_bytes == 2 * 512  # bf16[2,128] read and written
    # bf16[16,128] gathered over 4 chips of one slice: 3/4 of 4096 bytes leave the chip, on ICI.
    assert body.ici_bytes == 3072 and body.dcn_bytes == 0
    # Splash forward: 2 matmuls x 2 FLOPs x (2 x 4 rows) x 1024 x 1024 x 64, causal 512-blocks: 3/4.
    assert body.kernel_flops == 2 * 2 * 8 * 1024 * 1024 * 64 * 0.75
    assert body.host_bytes == 2048  # the bf16[1,8,128] update written to host memory (S(5))
    # f32[1024] all-reduced over ids {0,2,4,6}: two slices of 4, so DCN: 2 x 4096 x 3/4; plus a
    # megascale all-reduce send of f32[256] over 2 slices: 2 x 1024 x 1/2.
    assert entry.dcn_bytes == 6144 + 1024
    assert entry.host_bytes == 256  # copy-start of f32[64] to host memory
    assert profile.total("matmul_flops") == 4 * 2 * 8 * 256 * 128 and profile.total("host_bytes") == 4 * 2048 + 256
    # On an MXU 128 wide, the same matmul wastes less.
    assert read(TINY_HLO.read_text(), mxu_width=128).total("matmul_flops") == 4 * 2 * 8 * 128 * 128


def module(entry: str, *computations: str) -> str:
    """An HLO module's text around an entry computation's instructions."""
    return "\n".join([*computations, "ENTRY %main (p: f32[]) -> f32[] {", entry, "}"])


def test_a_convolution_counts_only_window_positions_inside_its_input():
    """A 3-wide window with one position of padding each side over 4 positions covers
    2 + 3 + 3 + 2 = 10 input positions, not 4 x 3: batched matmuls hide their batch in padded
    windows like this one."""
    text = module(
        "  %lhs = f32[2,4,5]{2,1,0} parameter(0)\n"
        "  %rhs = f32[3,5,3]{2,1,0} parameter(1)\n"
        "  ROOT %conv = f32[2,4,3]{2,1,0} convolution(%lhs, %rhs), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f"
    )
    # 2 x batch 2 x 3 output features (no padding on a 1-wide MXU) x 5 input features x 10.
    assert read(text, mxu_width=1).total("matmul_flops") == 2 * 2 * 3 * 5 * 10


def test_a_fusion_moves_only_what_it_slices_and_the_update_it_writes():
    fused = """%fused_update (p0: bf16[32,8,128], p1: bf16[8,128], p2: s32[], p3: bf16[32,8,128]) -> (bf16[32,8,128], bf16[1,8,128]) {
  %p0 = bf16[32,8,128]{2,1,0} parameter(0)
  %p1 = bf16[8,128]{1,0} parameter(1)
  %p2 = s32[]{:T(128)S(2)} parameter(2)
  %p3 = bf16[32,8,128]{2,1,0} parameter(3)
  %zero = s32[]{:T(128)} constant(0)
  %taken = bf16[1,8,128]{2,1,0} dynamic-slice(%p3, %p2, %zero, %zero), dynamic_slice_sizes={1,8,128}
  %row = bf16[1,8,128]{2,1,0} bitcast(%p1)
  %updated = bf16[32,8,128]{2,1,0} dynamic-update-slice(%p0, %row, %p2, %zero, %zero)
  ROOT %out = (bf16[32,8,128]{2,1,0}, bf16[1,8,128]{2,1,0}) tuple(%updated, %taken)
}"""
    entry = (
        "  %a = bf16[32,8,128]{2,1,0} parameter(0)\n"
        "  %b = bf16[8,128]{1,0} parameter(1)\n"
        "  %i = s32[]{:T(128)S(2)} parameter(2)\n"
        "  %c = bf16[32,8,128]{2,1,0} parameter(3)\n"
        "  ROOT %f = (bf16[32,8,128]{2,1,0}, bf16[1,8,128]{2,1,0}) fusion(%a, %b, %i, %c), kind=kLoop, "
        "calls=%fused_update"
    )
    # Reads: nothing of the buffer it updates in place, the 2 KiB row, the 2 KiB slice of %c.
    # Writes: the 2 KiB update and the 2 KiB slice; not the 64 KiB buffer.
    assert read(module(entry, fused)).total("memory_bytes") == 4 * 2048


def test_the_buffer_assignment_reads_to_the_executables_memory():
    memory = hlo_text.buffer_memory(TINY_BUFFERS.read_text())
    # HBM only (no color): parameters 0 and 1 are arguments; 0 and the unnamed allocation are
    # live out (0 both: aliased); one preallocated block holds the temporaries. VMEM (color 2)
    # and host memory (color 5) are left out.
    assert memory == hlo_text.BufferMemory(
        argument_bytes=13228441600 + 300,
        output_bytes=13228441600 + 200,
        alias_bytes=13228441600,
        temp_bytes=17029824512,
    )
    assert memory.total_bytes == 300 + 200 + 13228441600 + 17029824512
    with pytest.raises(hlo_text.HloError, match="not a buffer assignment"):
        hlo_text.buffer_memory("HloModule jit_train_step")


def test_a_profile_survives_json():
    profile = read(TINY_HLO.read_text())
    assert StepProfile.from_json(profile.to_json()) == profile


def test_text_that_is_not_an_hlo_module_is_refused():
    with pytest.raises(hlo_text.HloError, match="no ENTRY computation"):
        read("Segmentation fault")


def test_a_loop_whose_bound_cannot_be_read_is_refused():
    text = TINY_HLO.read_text().replace("%constant.4 = s32[]{:T(128)} constant(4)", "")
    with pytest.raises(hlo_text.HloError, match=r"cannot tell the trip count of while\.1"):
        read(text)


def test_a_loop_counting_with_an_unsigned_counter_is_read_too():
    """Collective (windowed) matmuls loop over their shards with a u32 counter."""
    text = TINY_HLO.read_text().replace(
        "%constant.4 = s32[]{:T(128)} constant(4)", "%constant.4 = u32[]{:T(128)} constant(4)"
    )
    (body,) = [s for s in read(text).scopes if s.name == "body"]
    assert body.runs == 4


def test_the_compilers_known_trip_count_wins():
    text = TINY_HLO.read_text().replace(
        'body=%body, backend_config={"flag_configs":[]}', 'body=%body, backend_config={"known_trip_count":{"n":"80"}}'
    )
    (body,) = [s for s in read(text).scopes if s.name == "body"]
    assert body.runs == 80


@pytest.mark.parametrize(
    "groups, chips_per_slice, expected",
    [
        ("{{0,1,2,3},{4,5,6,7}}", 4, (4, False)),
        ("{{0,4},{1,5},{2,6},{3,7}}", 4, (2, True)),
        ("[2,4]<=[8]", 4, (4, False)),
        ("[4,2]<=[2,4]T(1,0)", 4, (2, True)),  # {0,4},{1,5},...: one chip of each slice
        ("mesh['axis_0'=2,'axis_1'=16] {'axis_1'}", 16, (16, False)),
        ("mesh['axis_0'=2,'axis_1'=16] {'axis_0'}", 16, (2, True)),
        ("mesh['axis_0'=16] {'axis_0'}", 16, (16, False)),
    ],
)
def test_replica_groups_in_every_form_say_whether_they_cross_slices(groups, chips_per_slice, expected):
    assert hlo_text.group_crosses_slices(groups, chips_per_slice) == expected


@pytest.mark.parametrize(
    "q_len, block, fraction",
    [(8192, 2048, 10 / 16), (1024, 512, 3 / 4), (256, 256, 1.0), (8192, 8192, 1.0), (4096, 512, 36 / 64)],
)
def test_causal_attention_computes_the_blocks_on_and_below_the_diagonal(q_len, block, fraction):
    assert hlo_profile._causal_block_fraction(q_len, q_len, block, block) == pytest.approx(fraction)


@pytest.mark.parametrize(
    "name, results, matmuls",
    [
        ("splash_mha_fwd_segmented_residuals.3", 2, 2),
        ("splash_mha_dq_segmented_no_residuals.1", 1, 3),
        ("splash_mha_dkv_segmented_no_residuals.1", 2, 4),
        ("splash_mha_dkv_segmented_no_residuals.2", 3, 5),  # fused backward: dq too
        ("custom-call.7", 1, 0),
    ],
)
def test_attention_kernels_count_their_matmuls(name, results, matmuls):
    shape = "(" + ", ".join(["bf16[1,2,256,64]{3,2,1,0}"] * results) + ")"
    operands = "operand_layout_constraints={s8[1,1,1]{2,1,0}, bf16[1,2,256,64]{3,2,1,0}, bf16[1,2,256,64]{3,2,1,0}}"
    rest = f'%a), custom_call_target="tpu_custom_call", {operands}, metadata={{op_name="x"}}'
    kernel = hlo_text.Instruction(name, shape, "custom-call", rest)
    assert hlo_profile.attention_kernel_flops(kernel) == matmuls * 2 * 2 * 256 * 256 * 64


@pytest.mark.parametrize(
    "kind, target, expected",
    [
        ("ALL_REDUCE", "{1,2}x{0:3}", 2 * 1024 * 1 / 2),
        ("ALL_REDUCE", "{1,2,3,4}x{0:3}", 2 * 1024 * 3 / 4),
        ("ALL_GATHER", "{1,2}x{0:3}", 1024),
        ("REDUCE_SCATTER", "{0:3}x{0:3}", 1024 * 3 / 4),
        ("ALL_REDUCE", "{1}x{0:3}", 0),
    ],
)
def test_megascale_sends_count_the_bytes_leaving_for_other_slices(kind, target, expected):
    rest = f'frontend_attributes={{_xla_megascale_transfer_type="{kind}",_xla_megascale_target="{target}"}}'
    assert hlo_profile.megascale_bytes("(f32[256]{0}, u32[]{:S(2)}, token[])", rest) == expected


def test_collectives_send_what_a_ring_sends():
    one_kib = "f32[256]{0}"
    assert hlo_profile.collective_bytes("all-gather", one_kib, 4) == 768
    assert hlo_profile.collective_bytes("all-reduce", one_kib, 4) == 1536
    assert hlo_profile.collective_bytes("reduce-scatter", one_kib, 4) == 3072
    assert hlo_profile.collective_bytes("all-reduce", one_kib, 1) == 0


def test_a_computation_lasts_as_long_as_its_longest_engine():
    scope = Scope("body", runs=1, matmul_flops=100, ici_bytes=20, dcn_bytes=3, host_bytes=20)
    times = scope_times(scope, TOY_HARDWARE)  # compute 1 s, ICI 2 s, host 4 s; DCN is the DCN term's
    assert (times.exposed_ici, times.exposed_host) == (1.0, 2.0)
    assert timed(scope).step_seconds == 4.0
    assert timed(scope).exposed_dcn_seconds == 0.0  # no DCN term given


def test_communication_hides_behind_compute_and_only_the_excess_is_exposed():
    scope = Scope("body", runs=10, matmul_flops=100, ici_bytes=30, dcn_bytes=0.5, host_bytes=2)
    times = scope_times(scope, TOY_HARDWARE)
    assert (times.compute, times.ici, times.host) == (1.0, 3.0, 0.4)
    assert (times.exposed_ici, times.exposed_host) == (2.0, 0.0)  # all behind ICI
    prediction = predict(
        StepProfile((scope,)), TOY_HARDWARE, overhead=1.0, tokens_per_chip=300, model_flops_per_chip=15000
    )
    assert prediction.step_seconds == 30.0  # 10 runs x (1 s compute + 2 s exposed ICI)
    assert prediction.tokens_per_second_per_chip == 10.0
    assert prediction.mfu == 0.5  # 15000 FLOPs / (30 s x 1000 FLOP/s)


def test_the_calibrated_overhead_scales_every_part_so_the_breakdown_adds_up():
    scope = Scope(
        "body", runs=2, matmul_flops=50, memory_bytes=50, kernel_flops=500, ici_bytes=30, dcn_bytes=4, host_bytes=10
    )
    prediction = predict(
        StepProfile((scope,)), TOY_HARDWARE, overhead=1.25, tokens_per_chip=1, model_flops_per_chip=1, dcn_seconds=0.5
    )
    parts = (
        prediction.compute_seconds,
        prediction.exposed_ici_seconds,
        prediction.exposed_dcn_seconds,
        prediction.exposed_host_seconds,
    )
    # compute 1.5 s, ICI 3 s, host 2 s per run: the run lasts 3 s; the DCN term is added unscaled.
    assert parts == (1.25 * 2 * 1.5, 1.25 * 2 * 1.5, 0.5, 0.0)
    assert prediction.step_seconds == pytest.approx(sum(parts))
    assert "predicted step time: 8.000 s" in prediction.lines()


def test_a_step_with_nothing_to_time_is_refused():
    with pytest.raises(ValueError, match="no work the model can time"):
        predict(
            StepProfile((Scope("entry", runs=1),)),
            TOY_HARDWARE,
            overhead=1.0,
            tokens_per_chip=1,
            model_flops_per_chip=1,
        )


def test_the_fitted_overhead_balances_the_anchors_errors_in_ratio():
    overhead = fitted_overhead({"a": 1.0, "b": 4.0}, {"a": 2.0, "b": 2.0})
    assert overhead == pytest.approx(1.0)  # ratios 2 and 1/2
    assert fitted_overhead({"a": 3.0}, {"a": 3.3}) == pytest.approx(1.1)


def test_every_calibrated_model_is_within_10_percent_of_the_anchors_it_is_calibrated_on():
    assert speed_model("v6e") is SPEED_MODELS["v6e"] and speed_model("v5e") is None
    for model in SPEED_MODELS.values():
        calibrating = [a for a in model.anchors if a.calibrated]
        assert calibrating, f"{model.hardware.generation}: no anchor calibrates it"
        ratios = [
            (a.published_step_seconds - model.dcn_seconds(a.profile, a.slices))
            / raw_step_seconds(a.profile, model.hardware)
            for a in calibrating
        ]
        assert min(ratios) <= model.overhead <= max(ratios)
        for anchor in model.anchors:
            assert anchor.profile.scopes, f"{anchor.name}: no recorded profile"
        for anchor in calibrating:
            assert abs(model.error_percent(anchor)) < 10, anchor.name


sizes = st.floats(min_value=0, max_value=1e12, allow_nan=False)


@st.composite
def scopes(draw):
    return Scope(
        "s",
        runs=draw(st.integers(min_value=1, max_value=100)),
        matmul_flops=draw(st.integers(min_value=1, max_value=10**10)),
        memory_bytes=draw(sizes),
        reduce_bytes=draw(sizes),
        slice_bytes=draw(sizes),
        kernel_flops=draw(sizes),
        ici_bytes=draw(sizes),
        dcn_bytes=draw(sizes),
        host_bytes=draw(sizes),
    )


def timed(scope: Scope):
    return predict(StepProfile((scope,)), TOY_HARDWARE, overhead=1.0, tokens_per_chip=1, model_flops_per_chip=1)


@given(scopes())
def test_doubling_a_steps_flops_never_predicts_less_compute(scope):
    doubled = dataclasses.replace(scope, matmul_flops=2 * scope.matmul_flops, kernel_flops=2 * scope.kernel_flops)
    assert timed(doubled).compute_seconds >= timed(scope).compute_seconds
    assert timed(doubled).step_seconds >= timed(scope).step_seconds * (1 - 1e-12)  # summed parts round


@given(scopes(), sizes)
def test_offloading_more_never_predicts_less_host_transfer_time(scope, more):
    offloaded = dataclasses.replace(scope, host_bytes=scope.host_bytes + more)
    assert scope_times(offloaded, TOY_HARDWARE).host >= scope_times(scope, TOY_HARDWARE).host
    assert timed(offloaded).exposed_host_seconds >= timed(scope).exposed_host_seconds


@given(scopes())
def test_exposed_communication_is_never_negative(scope):
    prediction = timed(scope)
    assert min(prediction.exposed_ici_seconds, prediction.exposed_dcn_seconds, prediction.exposed_host_seconds) >= 0
    assert math.isclose(
        prediction.step_seconds,
        prediction.compute_seconds
        + prediction.exposed_ici_seconds
        + prediction.exposed_dcn_seconds
        + prediction.exposed_host_seconds,
        rel_tol=1e-9,
    )


@pytest.mark.parametrize(
    "pairs, counted",
    [
        ("{{0,1},{1,0}}", [("ici_bytes", 1024.0)]),
        ("{{0,4},{4,0}}", [("dcn_bytes", 1024.0), ("dcn_steps", 1.0), ("dcn_transfers", 1.0)]),
    ],
)
def test_a_collective_permute_crosses_slices_when_a_pair_does(pairs, counted):
    rest = f"%x), channel_id=1, source_target_pairs={pairs}, backend_config={{}}"
    assert list(hlo_profile._collective("collective-permute", "f32[256]{0}", rest, 4)) == counted


def test_an_all_reduce_across_slices_counts_its_ring_steps_over_the_slices_it_spans():
    # 4 chips per slice; groups {0,4,8} span 3 slices: 2 x (3 - 1) ring steps, one transfer.
    rest = "%x), channel_id=1, replica_groups={{0,4,8},{1,5,9}}, to_apply=%add"
    counted = dict(hlo_profile._collective("all-reduce", "f32[256]{0}", rest, 4))
    assert counted == {"dcn_bytes": pytest.approx(2 * 1024 * 2 / 3), "dcn_steps": 4.0, "dcn_transfers": 1.0}


@pytest.mark.parametrize(
    "transfer, target, steps",
    [
        ("ALL_REDUCE", "{1,2}x{0:255}", 2.0),
        ("ALL_REDUCE", "{0:31}x{0:255}", 62.0),
        ("ALL_GATHER", "{0:3}x{0:7}", 3.0),
        ("REDUCE_SCATTER", "{0,1}x{0:7}", 1.0),
        ("SEND", "{0,1}x{0:7}", 1.0),
    ],
)
def test_a_megascale_send_counts_the_ring_steps_of_its_transfer(transfer, target, steps):
    rest = f'frontend_attributes={{_xla_megascale_target="{target}",_xla_megascale_transfer_type="{transfer}"}}'
    assert hlo_profile.megascale_steps(rest) == steps


@pytest.mark.parametrize(
    "shape, result",
    [
        (
            "((bf16[4,8]{1,0:S(5)}, bf16[1,8]{1,0}, s32[]{:T(128)}), bf16[4,8]{1,0:S(5)}, u32[]{:S(2)})",
            "bf16[4,8]{1,0:S(5)}",
        ),
        ("(bf16[2,128]{1,0}, bf16[16,128]{1,0})", "bf16[16,128]{1,0}"),  # all-gather-start: (operand, result)
        ("f32[1024]{0}", "f32[1024]{0}"),
    ],
)
def test_an_async_start_is_counted_by_its_result(shape, result):
    assert hlo_profile._async_result(shape) == result
