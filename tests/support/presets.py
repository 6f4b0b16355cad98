"""The preset names as the refusals list them, read from domain/training/presets.py's PRESETS:
a test of a message that names the valid presets checks the names PRESETS holds, so adding a
preset changes no test that is not about it."""

from __future__ import annotations

from domain.training.presets import PRESETS

ALL_PRESETS = ", ".join(PRESETS)  # every preset, in PRESETS' order
TPU_PRESETS = ", ".join(name for name, preset in PRESETS.items() if preset.runs_on_tpu)
CPU_PRESETS = ", ".join(name for name, preset in PRESETS.items() if not preset.runs_on_tpu)


def presets_for(accelerator_name: str) -> str:
    """The presets of one TPU accelerator, as a refusal that asks for one of them lists them."""
    return ", ".join(name for name, preset in PRESETS.items() if preset.accelerator_name == accelerator_name)


# A one-layer, narrow Llama on a single 2x2 v6e slice: the fit check's compiler path in seconds.
TINY_COMPILE = {
    "override_model_config": "true",
    "base_num_decoder_layers": "1",
    "base_emb_dim": "256",
    "base_mlp_dim": "512",
    "base_num_query_heads": "4",
    "base_num_kv_heads": "4",
    "head_dim": "64",
    "vocab_size": "1024",
    "max_target_length": "128",
    "per_device_batch_size": "1",
    "ici_fsdp_parallelism": "4",
    "dcn_data_parallelism": "1",
}
