"""The layouts tried for the presets on their own slices (domain/perf/preset_layouts.json) as data:
each one's label in docs/capacity.md ("The presets, tuned for speed"), the preset it starts
from, the MaxText overrides that make it, the compiler flags it was compiled with, and what the
fit check's compile of it recorded (sizes, MaxText's count of its tokens and FLOPs, the profile
the speed model reads, and the settings that say which axis spans the slices).

Only the compile is recorded: every predicted figure is derived from the profile through the
current speed model when it is read (`LayoutCompile.prediction`), so a change of the model
re-derives the table. `python -m benchmarks.preset_layouts --compile` records the compiles again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from domain.perf.dcn import dcn_axis
from domain.perf.hlo_profile import StepProfile
from domain.perf.published_recipes import model_family
from domain.perf.speed_anchors import speed_model
from domain.perf.step_time import Prediction

LAYOUTS_FILE = Path(__file__).with_name("preset_layouts.json")
# Which compiler flags a layout was compiled with: the TPU workers' own (their LIBTPU_INIT_ARGS),
# or the procedure's (its scoped VMEM limit and collective-overlap flags, without MaxText's recipe
# flag groups that the workers add).
WORKER_FLAGS = "workers"
PROCEDURE_FLAGS = "procedure"


@dataclass(frozen=True)
class LayoutCompile:
    """What the fit check's compile of a layout said, per chip."""

    fits: bool
    usable_gib: float
    total_gib: float | None
    argument_gib: float | None
    slices: int
    maxtext: Mapping[str, str]  # the configuration's MaxText settings (the DCN axis is read from them)
    tokens_per_chip: float | None = None
    model_flops_per_chip: float | None = None
    profile: StepProfile | None = None

    @property
    def headroom_percent(self) -> float | None:
        if self.total_gib is None:
            return None
        return 100 * (self.usable_gib - self.total_gib) / self.usable_gib

    def prediction(self, generation: str) -> Prediction | None:
        """The predicted step from the recorded profile and the generation's current speed model
        (None when the step does not fit, or nothing calibrates the generation)."""
        model = speed_model(generation)
        if model is None or self.profile is None or not self.tokens_per_chip or not self.model_flops_per_chip:
            return None
        return model.predict(
            self.profile,
            tokens_per_chip=self.tokens_per_chip,
            model_flops_per_chip=self.model_flops_per_chip,
            family=model_family(self.maxtext.get("model_name", "")),
            slices=self.slices,
            dcn_axis=dcn_axis(self.maxtext, self.slices),
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LayoutCompile:
        return cls(
            fits=data["fits"],
            usable_gib=data["usable_gib"],
            total_gib=data.get("total_gib"),
            argument_gib=data.get("argument_gib"),
            slices=int(data["slices"]),
            maxtext=MappingProxyType({str(k): str(v) for k, v in data["maxtext"].items()}),
            tokens_per_chip=data.get("tokens_per_chip"),
            model_flops_per_chip=data.get("model_flops_per_chip"),
            profile=StepProfile.from_json(data["profile"]) if data.get("profile") else None,
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "fits": self.fits,
            "usable_gib": self.usable_gib,
            "total_gib": self.total_gib,
            "argument_gib": self.argument_gib,
            "slices": self.slices,
            "maxtext": dict(self.maxtext),
        }
        if self.fits:
            data |= {
                "tokens_per_chip": self.tokens_per_chip,
                "model_flops_per_chip": self.model_flops_per_chip,
                "profile": self.profile.to_json() if self.profile is not None else None,
            }
        return data


@dataclass(frozen=True)
class Layout:
    """One layout tried: the preset with `overrides`, compiled with `flags` (WORKER_FLAGS or
    PROCEDURE_FLAGS); `shipped` when it is the preset itself."""

    label: str
    preset: str
    overrides: Mapping[str, str]
    flags: str = WORKER_FLAGS
    shipped: bool = False
    compiled: LayoutCompile | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Layout:
        flags = data.get("flags", WORKER_FLAGS)
        if flags not in (WORKER_FLAGS, PROCEDURE_FLAGS):
            raise ValueError(
                f"layout {data['label']!r}: flags {flags!r} is neither {WORKER_FLAGS!r} nor {PROCEDURE_FLAGS!r}"
            )
        return cls(
            label=data["label"],
            preset=data["preset"],
            overrides=MappingProxyType({str(k): str(v) for k, v in data["overrides"].items()}),
            flags=flags,
            shipped=bool(data.get("shipped", False)),
            compiled=LayoutCompile.from_json(data["compiled"]) if data.get("compiled") else None,
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"label": self.label, "preset": self.preset, "overrides": dict(self.overrides)}
        if self.shipped:
            data["shipped"] = True
        data["flags"] = self.flags
        if self.compiled is not None:
            data["compiled"] = self.compiled.to_json()
        return data


@dataclass(frozen=True)
class PresetLayouts:
    """Every layout tried, in the table's order, on one TPU generation."""

    generation: str
    layouts: tuple[Layout, ...]

    @classmethod
    def from_json(cls, text: str) -> PresetLayouts:
        data = json.loads(text)
        return cls(generation=data["generation"], layouts=tuple(Layout.from_json(entry) for entry in data["layouts"]))

    def to_json(self) -> str:
        data = {"generation": self.generation, "layouts": [layout.to_json() for layout in self.layouts]}
        return json.dumps(data, indent=1) + "\n"


def load(path: Path = LAYOUTS_FILE) -> PresetLayouts:
    return PresetLayouts.from_json(path.read_text())


def shipped_compile(preset: str, path: Path = LAYOUTS_FILE) -> LayoutCompile | None:
    """The recorded compile of `preset` itself (its shipped layout, on its own topology and
    slices), or None when none is recorded."""
    return next((layout.compiled for layout in load(path).layouts if layout.shipped and layout.preset == preset), None)
