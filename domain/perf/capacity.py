"""Fast, analytic answers about a job's size: parameters, per-chip memory, FLOPs and cost, and
what a stack costs while it trains and while it waits idle.

The ahead-of-time compiler (trainer/fit_check.py) is the authority on whether a job fits; it
takes tens of seconds. This estimate takes microseconds, for policies and config validation. Its terms
are the ones that dominate a dense decoder trained with AdamW under FSDP/tensor sharding; the
per-layer working set is a constant calibrated against the compiler (docs/capacity.md lists the
calibration points and the estimate's error on each).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from domain.tpu.tpu_catalog import Accelerator, ChipHourPrice
from domain.training.maxtext_config import base_config, base_config_path

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The working set: transient memory per unit of one layer's activations (tokens x (emb + mlp)),
# and per unit of a bf16 copy of the sharded weights when they are stored in float32. The least-
# squares fit (domain/perf/hbm_estimate.py), rounded to 2 decimals, of the compiler's temporaries (its
# total less its arguments, which the state term models) on the configurations compiled in
# domain/perf/hbm_estimate_points.json; a test fails when these are not what that data gives.
WORKING_SET_ACTIVATION_FACTOR = 3.12
WORKING_SET_FP32_CAST_FACTOR = 1.17


@dataclass(frozen=True)
class ModelShape:
    emb: int
    layers: int
    mlp: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @property
    def params_per_layer(self) -> int:
        attention = self.emb * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        gated_mlp = 3 * self.emb * self.mlp
        return attention + gated_mlp + 2 * self.emb  # two RMSNorm scales

    @property
    def params(self) -> int:
        embedding_and_head = 2 * self.vocab * self.emb  # untied input embedding and output head
        return self.layers * self.params_per_layer + embedding_and_head + self.emb


def model_shape(overrides: Mapping[str, Any]) -> ModelShape:
    """The model MaxText builds for these overrides: its model config, then any base_* keys."""
    values: dict[str, Any] = dict(base_config())
    model_file = base_config_path().parent / "models" / f"{overrides.get('model_name', 'default')}.yml"
    if model_file.exists():
        values.update(yaml.safe_load(model_file.read_text()))
    values.update(overrides)
    return ModelShape(
        emb=int(values["base_emb_dim"]),
        layers=int(values["base_num_decoder_layers"]),
        mlp=int(values["base_mlp_dim"]),
        heads=int(values["base_num_query_heads"]),
        kv_heads=int(values["base_num_kv_heads"]),
        head_dim=int(values["head_dim"]),
        vocab=int(values["vocab_size"]),
    )


def _axis(values: Mapping[str, Any], name: str, devices: int, prefix: str) -> int:
    """An axis' size, with MaxText's single -1 filled from the devices the others leave."""
    axes = {k: int(v) for k, v in values.items() if k.startswith(prefix) and k.endswith("_parallelism")}
    size = axes.get(name, 1)
    if size != -1:
        return size
    others = math.prod(v for k, v in axes.items() if k != name and v != -1)
    return max(devices // others, 1)


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-chip bytes, in GiB, of the terms that dominate a training step."""

    state_gib: float  # weights and AdamW moments (the compiled step's arguments)
    gradients_gib: float
    saved_activations_gib: float  # each decoder layer's input (full remat), unless offloaded
    logits_gib: float
    working_set_gib: float

    @property
    def total_gib(self) -> float:
        return self.state_gib + self.gradients_gib + self.saved_activations_gib + self.logits_gib + self.working_set_gib

    def headroom_percent(self, usable_gib: float) -> float:
        return 100 * (usable_gib - self.total_gib) / usable_gib


def estimate_memory(overrides: Mapping[str, Any], *, chips_per_slice: int, slices: int) -> MemoryEstimate:
    """Per-chip memory of a training step of `overrides` on `slices` x `chips_per_slice` chips.

    Raises ValueError for a remat policy the estimate does not model (the fit check still does).
    """
    values = {**base_config(), **overrides}
    shape = model_shape(overrides)
    weight_bytes = DTYPE_BYTES[str(values["weight_dtype"])]
    grad_bytes = DTYPE_BYTES[str(values["grad_dtype"])]
    activation_bytes = DTYPE_BYTES[str(values["dtype"])]
    param_shards = _param_shards(values, chips_per_slice=chips_per_slice, slices=slices)
    tokens = _tokens(values)

    policy = str(values["remat_policy"])
    if policy == "full" or (policy == "custom" and values.get("decoder_layer_input") == "device"):
        saved = shape.layers * tokens * shape.emb * activation_bytes
    elif policy == "save_qkv_proj":
        # Each layer's input, as under full remat, plus its q/k/v projections; measured: +6.05
        # GiB of temporaries for the 8B preset, this term +6.0. Not divided by tensor
        # parallelism: the heads are split over its chips, but so is no part of the batch
        # (see _tokens), and measured, FSDP 4 x TP 4 needs 1.8 GiB more than FSDP 16, not less.
        qkv = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
        saved = shape.layers * tokens * (shape.emb + qkv) * activation_bytes
    elif policy == "custom" and values.get("decoder_layer_input") == "offload":
        saved = 0.0  # kept in host memory between the forward and the backward pass
    else:
        raise ValueError(f"remat_policy = {policy!r} is not modelled; the fit check compiles it")

    activation_units, cast_units = working_set_units(overrides, chips_per_slice=chips_per_slice, slices=slices)
    working = WORKING_SET_ACTIVATION_FACTOR * activation_units + WORKING_SET_FP32_CAST_FACTOR * cast_units
    return MemoryEstimate(
        # AdamW's two moments take the weights' dtype unless mu_dtype says otherwise.
        state_gib=shape.params * 3 * weight_bytes / param_shards / GIB,
        gradients_gib=shape.params * grad_bytes / param_shards / GIB,
        saved_activations_gib=saved / GIB,
        logits_gib=tokens * shape.vocab * activation_bytes / GIB,  # nor these: vocab split, batch whole
        working_set_gib=working / GIB,
    )


def working_set_units(overrides: Mapping[str, Any], *, chips_per_slice: int, slices: int) -> tuple[float, float]:
    """The bytes the working set's two constants multiply: one layer's activations (tokens x
    (emb + mlp)), and a copy of the sharded weights in the activations' dtype when the weights
    are stored wider (0 otherwise). domain/perf/hbm_estimate.py fits the constants on them."""
    values = {**base_config(), **overrides}
    shape = model_shape(overrides)
    activation_bytes = DTYPE_BYTES[str(values["dtype"])]
    activations = _tokens(values) * (shape.emb + shape.mlp) * activation_bytes
    wider_weights = DTYPE_BYTES[str(values["weight_dtype"])] > activation_bytes
    param_shards = _param_shards(values, chips_per_slice=chips_per_slice, slices=slices)
    cast = shape.params * activation_bytes / param_shards if wider_weights else 0.0
    return activations, cast


def _param_shards(values: Mapping[str, Any], *, chips_per_slice: int, slices: int) -> int:
    """How many ways the weights and optimizer state are split: FSDP x tensor x DCN FSDP."""
    return (
        _axis(values, "ici_fsdp_parallelism", chips_per_slice, "ici_")
        * _axis(values, "ici_tensor_parallelism", chips_per_slice, "ici_")
        * _axis(values, "dcn_fsdp_parallelism", slices, "dcn_")
    )


def _tokens(values: Mapping[str, Any]) -> float:
    """Tokens per chip in the activations' terms. MaxText splits the batch over the data and
    FSDP axes only (base.yml's activation_batch rule), so with tensor parallelism T each chip
    holds T x per_device_batch_size sequences with the embedding, heads and vocabulary split T
    ways: the same bytes as per_device_batch_size sequences whole."""
    return float(values["per_device_batch_size"]) * int(values["max_target_length"])


# Where a step's model FLOPs and tokens come from (the `flopsSource` of the workloads stack and
# the fit check's result): MaxText's own count for the resolved configuration, the one it logs
# TFLOP/s/device and Tokens/s/device with; or, where MaxText cannot be asked (a policy run
# without the trainer environment), the Llama formula below, which is only right for Llama-shaped
# dense models.
MAXTEXT_FLOPS = "maxtext"
LLAMA_FORMULA = "llamaFormula"
FLOPS_SOURCES = {
    MAXTEXT_FLOPS: "MaxText's count for this configuration (calculate_tflops_training_per_device)",
    LLAMA_FORMULA: "the Llama formula (6 x parameters x tokens + attention; wrong for MoE and GPT-style models)",
}


@dataclass(frozen=True)
class ModelFlops:
    """One training step's model FLOPs and tokens on all `chips` (rematerialization not counted,
    as in MFU), and their source: MAXTEXT_FLOPS, or LLAMA_FORMULA with `fallback_reason`."""

    per_step: float
    tokens_per_step: float
    chips: int
    source: str
    fallback_reason: str | None = None

    @property
    def per_chip(self) -> float:
        return self.per_step / self.chips

    @property
    def tokens_per_chip(self) -> float:
        return self.tokens_per_step / self.chips

    @property
    def described(self) -> str:
        """The source in words, for reports and policy messages."""
        why = f": {self.fallback_reason}" if self.fallback_reason else ""
        return f"{FLOPS_SOURCES[self.source]}{why}"


def llama_formula_flops(overrides: Mapping[str, Any], *, chips: int, fallback_reason: str | None = None) -> ModelFlops:
    """The fallback where MaxText cannot count: 6 FLOPs per parameter per token (forward and
    backward) plus attention's score and value products, halved for the causal mask, for a
    Llama-shaped model (gated MLP, untied embeddings). MaxText counts the unembedding only and
    each architecture's own layers: this is about 1.07x its count for llama3-8b, 0.59x for
    mixtral-8x7b (one expert counted, two run) and 1.34x for gpt3-6b (tests/test_model_flops.py)."""
    values = {**base_config(), **overrides}
    shape = model_shape(overrides)
    length = int(values["max_target_length"])
    tokens = float(values["per_device_batch_size"]) * length * int(values["gradient_accumulation_steps"]) * chips
    attention = 12 * shape.layers * shape.heads * shape.head_dim * length / 2
    return ModelFlops(
        per_step=tokens * (6 * shape.params + attention),
        tokens_per_step=tokens,
        chips=chips,
        source=LLAMA_FORMULA,
        fallback_reason=fallback_reason,
    )


@dataclass(frozen=True)
class CostEstimate:
    chips: int
    price_per_chip_hour_usd: float
    dollars_per_hour: float
    step_seconds: float | None = None
    steps: int | None = None
    assumed_mfu: float | None = None
    job_hours: float | None = None
    job_dollars: float | None = None


def cost_per_hour(chips: int, price_per_chip_hour_usd: float) -> CostEstimate:
    return CostEstimate(
        chips=chips,
        price_per_chip_hour_usd=price_per_chip_hour_usd,
        dollars_per_hour=round(chips * price_per_chip_hour_usd, 2),
    )


def job_cost(
    *,
    flops_per_step: float,
    steps: int,
    chips: int,
    peak_tflops_per_chip: float,
    assumed_mfu: float,
    price_per_chip_hour_usd: float,
    step_seconds: float | None = None,
) -> CostEstimate:
    """Steps x a step time, at the hourly price. The step time is `step_seconds` when known (the
    fit check's prediction), else FLOPs per step over what the chips deliver at the assumed MFU."""
    if not 0 < assumed_mfu <= 1:
        raise ValueError(f"assumed MFU = {assumed_mfu} must be in (0, 1]")
    if step_seconds is None:
        step_seconds = flops_per_step / (chips * peak_tflops_per_chip * 1e12 * assumed_mfu)
    hours = steps * step_seconds / 3600
    hourly = cost_per_hour(chips, price_per_chip_hour_usd)
    return CostEstimate(
        chips=chips,
        price_per_chip_hour_usd=price_per_chip_hour_usd,
        dollars_per_hour=hourly.dollars_per_hour,
        step_seconds=step_seconds,
        steps=steps,
        assumed_mfu=assumed_mfu,
        job_hours=hours,
        job_dollars=round(hours * hourly.dollars_per_hour, 2),
    )


# --- What a stack costs: while it trains, and while it waits for a job ------------------------

HOURS_PER_DAY = 24


@dataclass(frozen=True)
class StackCost:
    """What a stack's TPU chips cost per hour while a job trains (every slice up) and while none
    runs (the minSlices slices kept up), at one chip-hour price. TPU chips only: the Ray head's
    CPU node, disks and network are not counted. `price` None: the catalog has no price for
    this capacity choice and region and none was set; then only an idle stack with no chips up
    has a known cost ($0), and `unpriced` says why the rest is missing."""

    capacity: str  # the capacity choice priced (the stack's first choice)
    training_chips: int
    idle_chips: int
    price: ChipHourPrice | None
    unpriced: str | None = None

    @property
    def price_per_chip_hour(self) -> float | None:
        return self.price.usd if self.price else None

    @property
    def training_dollars_per_hour(self) -> float | None:
        return _dollars(self.training_chips, self.price)

    @property
    def idle_dollars_per_hour(self) -> float | None:
        return _dollars(self.idle_chips, self.price)

    @property
    def idle_dollars_per_day(self) -> float | None:
        return _dollars(self.idle_chips, self.price, hours=HOURS_PER_DAY)

    @property
    def basis(self) -> str:
        """How the figures were priced, or why there are none: what the stack exports next to them."""
        if self.price is None:
            return self.unpriced or ""
        usd = self.price.usd
        shown = f"{usd:.2f}" if round(usd, 2) == usd else f"{usd:g}"  # $2.70; $0.7803 as listed
        said = f"{self.price.capacity} in {self.price.region} at ${shown} per chip-hour ({self.price.source})"
        return f"{said}; {self.price.assumption}" if self.price.assumption else said


def _dollars(chips: int, price: ChipHourPrice | None, *, hours: int = 1) -> float | None:
    if chips == 0:
        return 0.0  # nothing up costs nothing, whatever the price
    if price is None:
        return None
    return round(chips * price.usd * hours, 2)


def price_problem(price: float, chips: int) -> str | None:
    """Why a chip-hour price cannot price `chips` chips (a day of them is more dollars than a float
    holds), as the rest of `pricePerChipHour = VALUE ...`; None when it can. The infra settings
    refuse such a price with this (domain/config/settings.py), before `stack_cost` is asked."""
    if math.isfinite(price * chips * HOURS_PER_DAY):
        return None
    return (
        f"is out of range: times the stack's {chips} chips and {HOURS_PER_DAY} hours it is more dollars per day "
        "than a number holds; use a price in US dollars, for example 2.70"
    )


def stack_cost(
    *,
    accelerator: Accelerator,
    region: str,
    capacity: str,
    chips_per_slice: int,
    slices: int,
    min_slices: int,
    price_override: float | None = None,
) -> StackCost:
    """The stack's cost at its first capacity choice's price: `price_override` (the
    pricePerChipHour setting) when set, else the catalog's list price for that choice in
    `region`. Training holds every slice; idle holds min_slices of them (0: scaled to zero)."""
    if not 0 <= min_slices <= slices:
        raise ValueError(f"min_slices = {min_slices} must be within 0..slices ({slices})")
    price: ChipHourPrice | None
    out_of_range = None if price_override is None else price_problem(price_override, slices * chips_per_slice)
    if out_of_range is not None:
        raise ValueError(f"pricePerChipHour = {price_override:g} {out_of_range}")
    if price_override is not None:
        price = ChipHourPrice(
            usd=price_override, capacity=capacity, region=region, source="the pricePerChipHour setting"
        )
    else:
        price = accelerator.chip_hour_price(capacity, region)
    unpriced = None
    if price is None:
        unpriced = (
            f"no dollar figure: the catalog (domain/tpu/tpu_catalog.py) has no {capacity} list price for TPU "
            f"{accelerator.name} in {region}; set pricePerChipHour to what you pay per chip-hour "
            "(`pulumi config set pricePerChipHour <dollars>`)"
        )
    return StackCost(
        capacity=capacity,
        training_chips=slices * chips_per_slice,
        idle_chips=min_slices * chips_per_slice,
        price=price,
        unpriced=unpriced,
    )
