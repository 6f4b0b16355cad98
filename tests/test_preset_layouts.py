"""The layouts tried for the presets (domain/perf/preset_layouts.json) and the table docs/capacity.md
prints from them: read only from the recorded compiles, no compile here."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import preset_layouts as report
from domain.perf.preset_layouts import (
    LAYOUTS_FILE,
    PROCEDURE_FLAGS,
    Layout,
    LayoutCompile,
    PresetLayouts,
    load,
)
from domain.tpu.tpu_catalog import DATA_PARALLEL_OVERLAP, DENSE_VMEM_LIMIT, HOST_OFFLOAD, accelerator
from domain.training.presets import PRESETS

CAPACITY = Path(__file__).parents[1] / "docs" / "capacity.md"


def test_docs_capacity_prints_the_preset_layouts_of_the_recorded_data():
    """The table in docs/capacity.md ("The presets, tuned for speed") is this data's: regenerate it
    with `python -m benchmarks.preset_layouts` after re-recording or changing the speed model."""
    text = CAPACITY.read_text()
    assert report.BEGIN in text and report.END in text
    block = text.split(report.BEGIN, 1)[1].split(report.END, 1)[0].strip()
    assert block == report.report()


def test_recorded_layouts_read_back_as_they_were_written():
    layouts = load()
    assert layouts.to_json() == LAYOUTS_FILE.read_text()
    assert PresetLayouts.from_json(layouts.to_json()) == layouts
    refused = LayoutCompile.from_json(
        {"fits": False, "usable_gib": 31.24, "total_gib": 50.3, "argument_gib": 9.1, "slices": 2, "maxtext": {}}
    )
    assert refused.profile is None and refused.prediction("v6e") is None
    assert LayoutCompile.from_json(refused.to_json()) == refused


def test_every_layout_is_compiled_and_the_shipped_ones_are_the_presets():
    layouts = load()
    assert all(layout.compiled is not None for layout in layouts.layouts)
    shipped = {layout.preset: layout for layout in layouts.layouts if layout.shipped}
    assert set(shipped) == {name for name, preset in PRESETS.items() if preset.runs_on_tpu}
    for name, layout in shipped.items():
        assert dict(layout.overrides) == {} and layout.flags != PROCEDURE_FLAGS
        compiled = layout.compiled
        assert compiled is not None and compiled.slices == PRESETS[name].slices
        for key, value in PRESETS[name].maxtext_overrides.items():
            if key != "steps":
                assert compiled.maxtext[key] == value
        prediction = compiled.prediction(layouts.generation)
        assert prediction is not None and prediction.multislice is not None


def test_a_layout_refuses_flags_it_does_not_know():
    data = json.loads(LAYOUTS_FILE.read_text())["layouts"][0] | {"flags": "mine"}
    try:
        Layout.from_json(data)
    except ValueError as error:
        assert "mine" in str(error)
    else:
        raise AssertionError("a layout with unknown flags was read")


def test_the_procedures_flags_drop_the_recipe_flag_groups():
    flags = report.procedure_flags(accelerator("v6e")).split()
    assert report.PROCEDURE_VMEM_LIMIT in flags
    assert not set(flags) & (set(DENSE_VMEM_LIMIT) | set(DATA_PARALLEL_OVERLAP) | set(HOST_OFFLOAD))
