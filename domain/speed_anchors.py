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

# MaxText's recipe flag groups (xla_flags_library.py) that are not already the workers' own
# flags (domain/tpu_catalog.py has LAYOUT_FOR_ALL_REDUCE_SCATTER and CF_FOR_ALL_GATHER less the
# all-gather fusion libtpu 0.0.52 refuses). Not reproduced: the 8B recipes' SparseCore
# all-reduce offload (ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE).
DENSE_VMEM_LIMIT = "--xla_tpu_scoped_vmem_limit_kib=98304"
DATA_PARALLEL_OVERLAP = (
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_tpu_data_parallel_opt_different_sized_ops=true"
)
HOST_OFFLOAD_FLAGS = " ".join(
    (
        "--xla_tpu_enable_all_experimental_scheduler_features=true",
        "--xla_tpu_enable_scheduler_memory_pressure_tracking=true",
        "--xla_tpu_host_transfer_overlap_limit=24",
        "--xla_tpu_aggressive_opt_barrier_removal=ENABLED",
        "--xla_lhs_prioritize_async_depth_over_stall=ENABLED",
        "--xla_tpu_enable_ag_backward_pipelining=true",
        "--xla_should_allow_loop_variant_parameter_in_chain=ENABLED",
        "--xla_should_add_loop_invariant_op_in_chain=ENABLED",
        "--xla_max_concurrent_host_send_recv=100",
        "--xla_tpu_scheduler_percent_shared_memory_limit=100",
        "--xla_latency_hiding_scheduler_rerun=2",
    )
)
DISABLE_COLLECTIVE_MATMUL = "--xla_jf_spmd_threshold_for_windowed_einsum_mib=1000000"
RECIPE_FLAGS = f"{DENSE_VMEM_LIMIT} {DATA_PARALLEL_OVERLAP} {HOST_OFFLOAD_FLAGS}"


def _frozen(values: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(values))


# What every Llama 3.1 Trillium recipe sets: FSDP over the slice, 8k sequences, flash
# attention with 2048 blocks and the fused backward kernel, custom remat with each layer's
# input and its q/k/v projections offloaded to host memory.
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
        "sa_use_fused_bwd_kernel": "true",
        **{
            f"sa_block_{block}": "2048"
            for block in ("q", "kv", "kv_compute", "q_dkv", "kv_dkv", "kv_dkv_compute", "q_dq", "kv_dq")
        },
    }
)

V6E_PEAK = accelerator("v6e").peak_bf16_tflops_per_chip * 1e12
V6E = Hardware(
    generation="v6e",
    peak_flops=V6E_PEAK,
    # 918 TFLOP/s over 524,288 FLOP/cycle: the rate at which the cost model times the 8B anchor's
    # largest matmul fusion (2.886e12 FLOPs in 5,788,065 cycles) at 95% of peak.
    cycles_per_second=V6E_PEAK / 524_288,
    kernel_flops_per_second=0.95 * V6E_PEAK,
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
        extra_flags=f"{RECIPE_FLAGS} {DISABLE_COLLECTIVE_MATMUL}",
        published_step_seconds=3.393,
        calibrated=True,
        profile=StepProfile(
            (
                Scope(
                    name="main.64_spmd",
                    runs=1,
                    cycles=625175599,
                    kernel_flops=9277129359360.0,
                    ici_bytes=7545861345.0,
                    dcn_bytes=0.0,
                    host_bytes=27179089920.0,
                ),
                Scope(
                    name="wide.region_1.6_spmd.sunk.clone.clone.clone.clone.clone.sunk",
                    runs=32,
                    cycles=33990035,
                    kernel_flops=2061584302080.0,
                    ici_bytes=408944640.0,
                    dcn_bytes=0.0,
                    host_bytes=704643072.0,
                ),
                Scope(
                    name="wide.region_11.24_spmd.1.sunk",
                    runs=31,
                    cycles=90962906,
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
        extra_flags=f"{RECIPE_FLAGS} {DISABLE_COLLECTIVE_MATMUL}",
        published_step_seconds=17.79,
        calibrated=True,
        profile=StepProfile(
            (
                Scope(
                    name="main.64_spmd",
                    runs=1,
                    cycles=853233901,
                    kernel_flops=12369505812480.0,
                    ici_bytes=7387051135.875,
                    dcn_bytes=0.0,
                    host_bytes=1207959552.0,
                ),
                Scope(
                    name="wide.region_1.6_spmd.sunk.clone.clone.clone.clone.clone.sunk",
                    runs=80,
                    cycles=77392535,
                    kernel_flops=2748779069440.0,
                    ici_bytes=1657798656.0,
                    dcn_bytes=0.0,
                    host_bytes=603979776.0,
                ),
                Scope(
                    name="wide.region_11.24_spmd.1.sunk",
                    runs=79,
                    cycles=202477142,
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
        extra_flags=RECIPE_FLAGS,
        published_step_seconds=18.688,
        calibrated=False,
        profile=StepProfile(
            scopes=(
                Scope(
                    name="main.64_spmd",
                    runs=1,
                    cycles=796955369,
                    kernel_flops=12369505812480.0,
                    ici_bytes=19215383276.25,
                    dcn_bytes=0.0,
                    host_bytes=1207959552.0,
                ),
                Scope(
                    name="wide.region_1.6_spmd.sunk.clone.clone.clone.clone.clone.sunk",
                    runs=80,
                    cycles=77234235,
                    kernel_flops=2748779069440.0,
                    ici_bytes=1717567488.0,
                    dcn_bytes=0.0,
                    host_bytes=603979776.0,
                ),
                Scope(
                    name="wide.region_11.24_spmd.1.sunk",
                    runs=79,
                    cycles=203275869,
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
