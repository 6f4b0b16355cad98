"""MaxText's published TPU v6e training runs (domain/perf/tpu_recipes_v6e.json) as data the speed
model and its checks read: what each recipe set, what it measured, how the fit check compiles
it, and what that compile said here.

One file holds every fact about a published run (its source, settings, flags, published step,
compile results and profile); everything else (the speed model's anchors, their errors, the error
bands, the rankings in docs/capacity.md) is derived from it. `python -m benchmarks.published_recipes`
compiles the runs again and rewrites the compile results after a MaxText or libtpu upgrade.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from domain.perf.hlo_profile import StepProfile
from domain.tpu.tpu_catalog import accelerator

RECIPES_FILE = Path(__file__).with_name("tpu_recipes_v6e.json")
GENERATION = "v6e"

# Recipe settings that say where data comes from or how the run is logged and saved: not taken
# from the recipe (its tokenizer path is a file of the recipe's own checkout), so MaxText's
# defaults stand; they do not change the compiled step. (Not fit_results.NOT_COMPILED, the
# settings a cached result is recorded without.)
RECIPE_DATA_SETTINGS = frozenset({"tokenizer_path", "reuse_example_batch", "dataset_type", "enable_checkpointing"})
# Recipe flags the pinned libtpu (0.0.52) does not take, beyond those the catalog says it refuses
# for v6e: an unknown flag fails the compile. This one selects a chip configuration for the
# SparseCore all-reduce offload, which the compile here therefore does not reproduce.
UNKNOWN_TO_LIBTPU = ("--2a886c8_chip_config_name",)
# What a recipe changes when it does not fit as published and a change of remat does fit: the
# output projection recomputed instead of offloaded (docs/capacity.md says why it no longer fits).
OUT_PROJ_RECOMPUTED = MappingProxyType({"out_proj": "remat"})
# Model families: MaxText model names without their size. Llama 3, 3.1 and 3.3 share one
# architecture; every other family is its own.
FAMILY_ALIASES = MappingProxyType({"llama3.1": "llama3", "llama3.3": "llama3"})
_SIZE = re.compile(r"-[\dx.]+[bmk]?(-.*)?$")
# Settings a user changes between runs of one model to choose a layout: batch, slice shape and
# count, and what the backward pass keeps (remat). Runs of one model that differ only in these
# are ranked against each other (docs/capacity.md, "Ranking").
LAYOUT_CHOICES = frozenset(
    {
        "per_device_batch_size",
        "ici_fsdp_parallelism",
        "dcn_fsdp_parallelism",
        "remat_policy",
        "decoder_layer_input",
        "query_proj",
        "key_proj",
        "value_proj",
        "out_proj",
        "mlpwi",
        "mlpwo",
    }
)


def model_family(model_name: str) -> str:
    """`llama3.1-70b` -> `llama3`, `mixtral-8x7b` -> `mixtral`, `gemma3-12b` -> `gemma3`."""
    family = _SIZE.sub("", model_name)
    return FAMILY_ALIASES.get(family, family)


@dataclass(frozen=True)
class Compiled:
    """What the fit check's compile of a configuration said, per chip: whether it fits, its sizes
    in GiB (total = arguments + temporaries + outputs - aliased, as MaxText sums it) and, for the
    speed model, its work and profile. Recorded as data (the published runs, the memory
    estimate's points)."""

    fits: bool
    total_gib: float | None
    argument_gib: float | None = None
    temp_gib: float | None = None
    output_gib: float | None = None
    alias_gib: float | None = None
    changed: Mapping[str, str] = MappingProxyType({})  # settings changed from the recipe's to compile it
    tokens_per_chip: float | None = None
    model_flops_per_chip: float | None = None  # MaxText's count for this configuration
    profile: StepProfile | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Compiled:
        return cls(
            fits=data["fits"],
            total_gib=data.get("total_gib"),
            argument_gib=data.get("argument_gib"),
            temp_gib=data.get("temp_gib"),
            output_gib=data.get("output_gib"),
            alias_gib=data.get("alias_gib"),
            changed=MappingProxyType(dict(data.get("changed") or {})),
            tokens_per_chip=data.get("tokens_per_chip"),
            model_flops_per_chip=data.get("model_flops_per_chip"),
            profile=StepProfile.from_json(data["profile"]) if data.get("profile") else None,
        )

    def sizes_gib(self) -> tuple[float, float]:
        """Its arguments and total; a ValueError when the compile recorded no sizes."""
        if self.total_gib is None or self.argument_gib is None:
            raise ValueError("this compile recorded no sizes")
        return self.argument_gib, self.total_gib

    @property
    def beyond_arguments_gib(self) -> float:
        """Everything but the arguments (total - arguments): what the memory estimate's terms
        other than the state model."""
        argument, total = self.sizes_gib()
        return total - argument


@dataclass(frozen=True)
class PublishedRun:
    """One published run: the recipe, where it ran, what it measured, and its compiles here."""

    recipe: str  # MaxText's benchmark name (benchmarks/maxtext_trillium_model_configs.py)
    source: str  # the recipe's README, repository and path
    model_type: str | None
    slice_type: str
    slices: int
    tuning_params: Mapping[str, Any]
    libtpu_init_args: str
    published_step_seconds: float
    published_tflops_per_device: float
    calibrates: bool  # the speed model's overhead is fitted on it; every other run with a profile checks it
    compiled: Compiled | None  # as published
    compiled_changed: Compiled | None  # with `changed` settings, when it does not fit as published

    @property
    def name(self) -> str:
        """Unique: one recipe name is published for several slices."""
        return f"{self.recipe} ({self.slices} x {self.slice_type})"

    @property
    def chips_per_slice(self) -> int:
        return int(self.slice_type.rsplit("-", 1)[1])

    @property
    def family(self) -> str | None:
        """None when the recipe names no MaxText model (its README quotes no settings)."""
        return model_family(self.model_type) if self.model_type else None

    @property
    def predicted_from(self) -> Compiled | None:
        """The compile the speed model reads: as published, else the changed one that fits."""
        for compiled in (self.compiled, self.compiled_changed):
            if compiled is not None and compiled.fits and compiled.profile is not None:
                return compiled
        return None

    @property
    def published_mfu(self) -> float:
        return self.published_tflops_per_device / accelerator(GENERATION).peak_bf16_tflops_per_chip

    def layout(self) -> Mapping[str, str]:
        """The run's settings a user would not change to choose a layout: two runs with the
        same are the same job on different batch, slices or remat, and comparable."""
        return {
            key: str(value)
            for key, value in self.tuning_params.items()
            if key not in LAYOUT_CHOICES and key not in RECIPE_DATA_SETTINGS
        }


@dataclass(frozen=True)
class CompileSpec:
    """How the fit check compiles a run: a TPU preset (its model and settings are all replaced),
    the slice, the MaxText settings, and the recipe's flags on top of the workers' own."""

    preset: str
    topology: str
    slices: int
    overrides: Mapping[str, str]
    extra_flags: str


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def recipe_overrides(
    tuning_params: Mapping[str, Any],
    *,
    chips: int,
    slices: int,
    model_name: str,
    preset_overrides: Mapping[str, str],
    base: Mapping[str, Any],
) -> dict[str, str]:
    """A published run's MaxText settings as the fit check compiles them on a preset's job:
    MaxText's base config where the preset would differ (`preset_overrides` reset to `base`'s
    values), then the run's settings, a -1 (auto) parallelism axis made explicit, and the slices
    across DCN as data parallelism unless the run shards across them."""
    overrides = {key: _text(base.get(key)) for key in preset_overrides if key not in ("model_name", "steps")}
    overrides.update({"ici_tensor_parallelism": "1", "dcn_data_parallelism": str(slices), "dcn_fsdp_parallelism": "1"})
    if "dcn_fsdp_parallelism" in tuning_params:
        overrides["dcn_data_parallelism"] = "1"
    overrides.update({key: _text(value) for key, value in tuning_params.items() if key not in RECIPE_DATA_SETTINGS})
    for key, value in list(overrides.items()):
        if key.startswith("ici_") and value == "-1":
            overrides[key] = str(chips)
    overrides["model_name"] = model_name
    return overrides


def compile_spec(
    run: PublishedRun,
    *,
    preset: str,
    preset_overrides: Mapping[str, str],
    base: Mapping[str, Any],
    changed: Mapping[str, str] | None = None,
) -> CompileSpec:
    """The fit check's compile of `run` (recipe_overrides, with `changed` on top). Flags: the
    recipe's, less those libtpu refuses."""
    acc = accelerator(GENERATION)
    chips = run.chips_per_slice
    topology = next(name for name, shape in acc.shapes.items() if shape.chips == chips)
    overrides = recipe_overrides(
        run.tuning_params,
        chips=chips,
        slices=run.slices,
        model_name=run.model_type or "",
        preset_overrides=preset_overrides,
        base=base,
    )
    overrides.update(changed or {})
    refused = {flag for flag, _ in acc.refused_libtpu_flags(run.libtpu_init_args)}
    flags = [
        flag for flag in run.libtpu_init_args.split() if flag not in refused and not flag.startswith(UNKNOWN_TO_LIBTPU)
    ]
    return CompileSpec(preset, topology, run.slices, MappingProxyType(overrides), " ".join(flags))


def _run(data: Mapping[str, Any]) -> PublishedRun:
    source = data["source"]
    return PublishedRun(
        recipe=data["recipe"],
        source=f"{source['repository']} {source['path']}",
        model_type=data["model_type"],
        slice_type=data["slice_type"],
        slices=data["slices"],
        tuning_params=MappingProxyType(dict(data["tuning_params"] or {})),
        libtpu_init_args=data["libtpu_init_args"] or "",
        published_step_seconds=data["published"]["step_seconds"],
        published_tflops_per_device=data["published"]["tflops_per_device"],
        calibrates=bool(data.get("calibrates")),
        compiled=Compiled.from_json(data["compiled_here"]) if data.get("compiled_here") else None,
        compiled_changed=Compiled.from_json(data["compiled_changed"]) if data.get("compiled_changed") else None,
    )


def load(text: str) -> tuple[PublishedRun, ...]:
    return tuple(_run(entry) for entry in json.loads(text)["recipes"])


@cache
def published_runs() -> tuple[PublishedRun, ...]:
    return load(RECIPES_FILE.read_text())
