"""The speed model's calibration, written down once: each TPU generation's hardware rates, the
published TPU runs (anchors) it is calibrated on or checked against, how to compile each, and
what its compile said. The error on every anchor is derived here, never typed in.

Anchors: MaxText's Trillium recipes in AI-Hypercomputer/tpu-recipes (training/trillium/
Llama3.1-*-MaxText/v6e-*/README.md, tag tpu-recipes-v0.1.4, JAX 0.6.1): the published "completed
step" time of each, seq 8192, synthetic data, one slice. Their MaxText settings and XLA flag
groups are MaxText's benchmarks/maxtext_trillium_model_configs.py and xla_flags_library.py.
Re-record after a MaxText/libtpu upgrade with `python -m benchmarks.speed_anchors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from domain.hlo_profile import Scope, StepProfile
from domain.step_time import Anchor, Hardware, SpeedModel
from domain.tpu_catalog import accelerator

# The recipes' XLA flag groups are the v6e workers' own (domain/tpu_catalog.py), so an anchor
# adds only what its recipe sets beyond them: collective matmul off, for the two named so.
DISABLE_COLLECTIVE_MATMUL = "--xla_jf_spmd_threshold_for_windowed_einsum_mib=1000000"


def _frozen(values: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(values))


# What every Llama 3.1 Trillium recipe sets: FSDP over the slice, 8k sequences, flash
# attention with 2048 blocks and the fused backward kernel, custom remat with each layer's
# input and its q/k/v projections offloaded to host memory, the output projection recomputed.
RECIPE_SETTINGS = _frozen(
    {
        "ici_tensor_parallelism": "1",
        "max_target_length": "8192",
        "attention": "flash",
        "use_iota_embed": "true",
        "remat_policy": "custom",
        "decoder_layer_input": "offload",
        "query_proj": "offload",
        "key_proj": "offload",
        "value_proj": "offload",
        "out_proj": "remat",
        "sa_use_fused_bwd_kernel": "true",
        **{
            f"sa_block_{block}": "2048"
            for block in ("q", "kv", "kv_compute", "q_dkv", "kv_dkv", "kv_dkv_compute", "q_dq", "kv_dq")
        },
    }
)

V6E_PEAK = accelerator("v6e").peak_bf16_tflops_per_chip * 1e12
# The compute rates are libtpu's cost model's, measured on three full compiles' dumps (the two
# calibrating anchors, and the llama3-8b preset's layout on 2 x v6e-16 with the workers' earlier
# flags; benchmarks/roofline_vs_cost_model.py prints the comparison): the cost model's cycles
# over the roofline's at 918 TFLOP/s and 1640 GB/s, per class of work. Matmuls 1.07 to 1.11;
# other memory-bound work 2.38 to 2.96; reductions 10.6 to 11.9; slices 11.6 to 12.0. At the
# rounded means below, the compute of each is within 3.2% of the cost model's (0.969, 0.988,
# 1.031); the check anchor's, compared afterwards, 0.971 (docs/capacity.md, "Speed").
V6E_HBM = 1640e9  # Google's v6e table: HBM bandwidth per chip
V6E = Hardware(
    generation="v6e",
    peak_flops=V6E_PEAK,
    mxu_width=256,  # Trillium's MXUs are 256 x 256
    matmul_flops_per_second=V6E_PEAK / 1.09,
    kernel_flops_per_second=0.95 * V6E_PEAK,  # no cycle estimate: the rate of the largest matmuls
    memory_bytes_per_second=V6E_HBM / 2.58,
    reduce_bytes_per_second=V6E_HBM / 11.4,
    slice_bytes_per_second=V6E_HBM / 11.8,
    ici_bytes_per_second=400e9,  # Google's v6e table: 800 GB/s bidirectional ICI per chip
    dcn_bytes_per_second=12.5e9,  # assumed: 2 x 200 Gbps DCN NICs per 4-chip host; not calibrated
    host_bytes_per_second=64e9,  # PCIe Gen5 (Google's v6e page) x16, one direction
)

V6E_ANCHORS = (
    Anchor(
        name="llama3_1_8b_8192_no_collective_matmul",
        preset="llama3-8b",
        topology="4x4",
        slices=1,
        overrides=_frozen(
            {
                **RECIPE_SETTINGS,
                "model_name": "llama3.1-8b",
                "per_device_batch_size": "3",
                "ici_fsdp_parallelism": "16",
                "out_proj": "offload",
            }
        ),
        extra_flags=DISABLE_COLLECTIVE_MATMUL,
        published_step_seconds=3.393,
        calibrated=True,
        profile=StepProfile(
            scopes=(
                Scope(
                    name="main.64_spmd",
                    runs=1,
                    matmul_flops=170338402959360.0,
                    memory_bytes=67517189256.0,
                    reduce_bytes=1006632962.0,
                    slice_bytes=551550976.0,
                    kernel_flops=9277129359360.0,
                    ici_bytes=7545861345.0,
                    dcn_bytes=0.0,
                    host_bytes=27179089920.0,
                ),
                Scope(
                    name="wide.region_1.6_spmd.sunk.clone.clone.clone.clone.clone.sunk",
                    runs=32,
                    matmul_flops=11957188952064.0,
                    memory_bytes=2448712380.0,
                    reduce_bytes=0.0,
                    slice_bytes=0.0,
                    kernel_flops=2061584302080.0,
                    ici_bytes=408944640.0,
                    dcn_bytes=0.0,
                    host_bytes=704643072.0,
                ),
                Scope(
                    name="wide.region_11.24_spmd.1.sunk",
                    runs=31,
                    matmul_flops=29274497089536.0,
                    memory_bytes=4173268912.0,
                    reduce_bytes=1006632962.0,
                    slice_bytes=503316480.0,
                    kernel_flops=7215545057280.0,
                    ici_bytes=1226864640.0,
                    dcn_bytes=0.0,
                    host_bytes=704643072.0,
                ),
            )
        ),
    ),
    Anchor(
        name="llama3_1_70b_8192_bs2_bfloat16_no_collective_matmul",
        preset="llama3-70b",
        topology="4x8",
        slices=1,
        overrides=_frozen(
            {
                **RECIPE_SETTINGS,
                "model_name": "llama3.1-70b",
                "per_device_batch_size": "2",
                "ici_fsdp_parallelism": "32",
                "weight_dtype": "bfloat16",
            }
        ),
        extra_flags=DISABLE_COLLECTIVE_MATMUL,
        published_step_seconds=17.79,
        calibrated=True,
        profile=StepProfile(
            scopes=(
                Scope(
                    name="main.64_spmd",
                    runs=1,
                    matmul_flops=281543696187392.0,
                    memory_bytes=79027735494.0,
                    reduce_bytes=1342177282.0,
                    slice_bytes=603979776.0,
                    kernel_flops=12369505812480.0,
                    ici_bytes=7387051135.875,
                    dcn_bytes=0.0,
                    host_bytes=1207959552.0,
                ),
                Scope(
                    name="wide.region_1.6_spmd.sunk.clone.clone.clone.clone.clone.sunk",
                    runs=80,
                    matmul_flops=30786325577728.0,
                    memory_bytes=3047883452.0,
                    reduce_bytes=0.0,
                    slice_bytes=0.0,
                    kernel_flops=2748779069440.0,
                    ici_bytes=1657798656.0,
                    dcn_bytes=0.0,
                    host_bytes=603979776.0,
                ),
                Scope(
                    name="wide.region_11.24_spmd.1.sunk",
                    runs=79,
                    matmul_flops=78615081385984.0,
                    memory_bytes=6165530540.0,
                    reduce_bytes=1342177282.0,
                    slice_bytes=603979776.0,
                    kernel_flops=9620726743040.0,
                    ici_bytes=1657862144.0,
                    dcn_bytes=0.0,
                    host_bytes=603979776.0,
                ),
            )
        ),
    ),
    # Checked only: twice the slice, float32 weights, collective matmul left on.
    Anchor(
        name="llama3_1_70b_8192_bs2",
        preset="llama3-70b",
        topology="8x8",
        slices=1,
        overrides=_frozen(
            {
                **RECIPE_SETTINGS,
                "model_name": "llama3.1-70b",
                "per_device_batch_size": "2",
                "ici_fsdp_parallelism": "64",
                "weight_dtype": "float32",
            }
        ),
        extra_flags="",
        published_step_seconds=18.688,
        calibrated=False,
        profile=StepProfile(
            scopes=(
                Scope(
                    name="main.64_spmd",
                    runs=1,
                    matmul_flops=281543696187392.0,
                    memory_bytes=69219126420.0,
                    reduce_bytes=1342177282.0,
                    slice_bytes=633339904.0,
                    kernel_flops=12369505812480.0,
                    ici_bytes=19215383276.25,
                    dcn_bytes=0.0,
                    host_bytes=1207959552.0,
                ),
                Scope(
                    name="wide.region_1.6_spmd.sunk.clone.clone.clone.clone.clone.sunk",
                    runs=80,
                    matmul_flops=30786325577728.0,
                    memory_bytes=3018392260.0,
                    reduce_bytes=0.0,
                    slice_bytes=0.0,
                    kernel_flops=2748779069440.0,
                    ici_bytes=1717567488.0,
                    dcn_bytes=0.0,
                    host_bytes=603979776.0,
                ),
                Scope(
                    name="wide.region_11.24_spmd.1.sunk",
                    runs=79,
                    matmul_flops=78615081385984.0,
                    memory_bytes=4520708024.0,
                    reduce_bytes=1342177282.0,
                    slice_bytes=603979776.0,
                    kernel_flops=9620726743040.0,
                    ici_bytes=5086706688.0,
                    dcn_bytes=0.0,
                    host_bytes=603979776.0,
                ),
            )
        ),
    ),
)

SPEED_MODELS: Mapping[str, SpeedModel] = MappingProxyType({"v6e": SpeedModel(V6E, V6E_ANCHORS)})


def speed_model(generation: str) -> SpeedModel | None:
    """The calibrated model of a TPU generation, or None when no anchor calibrates one."""
    return SPEED_MODELS.get(generation)
