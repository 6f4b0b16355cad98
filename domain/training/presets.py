"""Training presets: which TPU slices a model is trained on, and the MaxText overrides it runs with.

The TPU presets start from the manual procedure's job commands and are tuned until MaxText's
ahead-of-time compiler says they fit with at least 5% HBM headroom (docs/capacity.md has the
numbers and what each choice costs). `tiny-cpu` is a Llama-shaped model small enough to train in
seconds on a laptop's CPU through a local Ray cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from domain.tpu.tpu_catalog import Accelerator, SliceShape, accelerator


@dataclass(frozen=True)
class Preset:
    """A model and the hardware it is sized for.

    `dcn_axis` names the MaxText parallelism axis that spans slices over the data-center network
    (`data` or `fsdp`); its `dcn_<axis>_parallelism` is set to the slice count, so a preset keeps
    working when a stack changes the number of slices.
    """

    name: str
    description: str
    accelerator_name: str | None  # None: runs on CPU (local Ray cluster), no TPU
    topology: str | None
    slices: int
    dcn_axis: str | None
    maxtext_overrides: Mapping[str, str]
    # The fit check's answer for the preset on its own slices (docs/capacity.md): per-chip HBM and
    # predicted MFU. The memory policies defer to the first, rayjob-predicted-mfu compares jobs
    # with the second; a `fitcheck` test compares both with a fresh compile.
    compiled_gib: float | None = None
    predicted_mfu: float | None = None

    @property
    def runs_on_tpu(self) -> bool:
        return self.accelerator_name is not None

    @property
    def accelerator(self) -> Accelerator:
        if self.accelerator_name is None:
            raise ValueError(f"preset {self.name!r} runs on CPU and has no TPU accelerator")
        return accelerator(self.accelerator_name)

    @property
    def slice_shape(self) -> SliceShape:
        return self.accelerator.shape(self.topology or "")


def _frozen(values: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(values))


PRESETS: Mapping[str, Preset] = MappingProxyType(
    {
        "llama3-8b": Preset(
            name="llama3-8b",
            description="Llama 3 8B on 2 x v6e-16: FSDP within a slice, data parallel across.",
            accelerator_name="v6e",
            topology="4x4",
            slices=2,
            dcn_axis="data",
            maxtext_overrides=_frozen(
                {
                    "model_name": "llama3-8b",
                    "dataset_type": "synthetic",
                    "per_device_batch_size": "4",
                    "max_target_length": "4096",
                    "steps": "100",
                    # FSDP over all 16 chips, as MaxText's v6e recipes shard 8B: the procedure's
                    # 4-way tensor parallelism adds an all-reduce per layer for memory it does
                    # not need and is predicted slower (3.288 s vs 2.777 s per step on 2 slices,
                    # full remat).
                    "ici_fsdp_parallelism": "16",
                    "ici_tensor_parallelism": "1",
                    # Keep the q/k/v projections instead of recomputing them in the backward
                    # pass: predicted 2.679 s per step against 2.777 s with full remat, for
                    # headroom 17.0% instead of 36.0% (docs/capacity.md, "The presets, tuned for
                    # speed").
                    "remat_policy": "save_qkv_proj",
                }
            ),
            compiled_gib=25.92,
            predicted_mfu=0.321,
        ),
        "llama3-70b": Preset(
            name="llama3-70b",
            description="Llama 3 70B on 2 x v6e-16: FSDP within a slice and across slices.",
            accelerator_name="v6e",
            topology="4x4",
            slices=2,
            dcn_axis="fsdp",
            maxtext_overrides=_frozen(
                {
                    "model_name": "llama3-70b",
                    "dataset_type": "synthetic",
                    "per_device_batch_size": "2",
                    "max_target_length": "4096",
                    "steps": "100",
                    # FSDP over the slice, as MaxText's v6e 70B recipes shard it, with the
                    # q/k/v and output projections offloaded as well as the layer input: the
                    # fastest predicted of the layouts tried, 15.887 s per step on 2 slices
                    # against 17.121 s for tensor parallelism x 4 with the layer input alone
                    # offloaded, with 24.1% headroom against its 16.6% (docs/capacity.md).
                    "ici_tensor_parallelism": "1",
                    "ici_fsdp_parallelism": "16",
                    # As written in the procedure (float32 weights, full remat) the step needs
                    # 50.3 GiB of temporaries per chip: it cannot fit 31.24 GiB. bf16 weights and
                    # moments halve the state; offloading each layer's input to host memory (the
                    # published v6e recipe's host-offloaded remat) frees the saved activations.
                    "weight_dtype": "bfloat16",
                    "remat_policy": "custom",
                    "decoder_layer_input": "offload",
                    "query_proj": "offload",
                    "key_proj": "offload",
                    "value_proj": "offload",
                    "out_proj": "offload",
                }
            ),
            compiled_gib=23.71,
            predicted_mfu=0.243,
        ),
        "tiny-cpu": Preset(
            name="tiny-cpu",
            description="A 2-layer Llama-shaped model for local runs on CPU (seconds per step).",
            accelerator_name=None,
            topology=None,
            slices=1,
            dcn_axis=None,
            maxtext_overrides=_frozen(
                {
                    "model_name": "llama3-8b",
                    "override_model_config": "true",
                    "hardware": "cpu",
                    "dataset_type": "synthetic",
                    "steps": "6",
                    "per_device_batch_size": "1",
                    "max_target_length": "64",
                    "base_emb_dim": "64",
                    "base_num_decoder_layers": "2",
                    "base_mlp_dim": "128",
                    "base_num_query_heads": "4",
                    "base_num_kv_heads": "4",
                    "head_dim": "16",
                    "vocab_size": "256",
                    "enable_checkpointing": "true",
                    "checkpoint_period": "2",
                    "skip_jax_distributed_system": "true",
                    "attention": "dot_product",
                }
            ),
        ),
    }
)


# The manual procedure's job overrides, kept to show what the presets changed and why.
PROCEDURE_OVERRIDES: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "llama3-8b": _frozen({"ici_fsdp_parallelism": "4", "ici_tensor_parallelism": "4"}),
        "llama3-70b": _frozen(
            {
                "ici_tensor_parallelism": "4",
                "ici_fsdp_parallelism": "4",
                "weight_dtype": "float32",
                "remat_policy": "full",
                "decoder_layer_input": "device",
            }
        ),
    }
)


def preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}") from None


def maxtext_overrides(chosen: Preset, slices: int) -> dict[str, str]:
    """The preset's MaxText overrides for `slices` slices, DCN parallelism included."""
    overrides = dict(chosen.maxtext_overrides)
    if chosen.dcn_axis is not None:
        for axis in ("data", "fsdp"):
            overrides[f"dcn_{axis}_parallelism"] = str(slices if axis == chosen.dcn_axis else 1)
    return overrides
