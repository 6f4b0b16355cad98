"""The speed model's calibration, written down once: each TPU generation's hardware rates, and
its anchors: the published TPU runs it is calibrated on or checked against, with what the fit
check's compile of each said. The anchors are read from domain/perf/tpu_recipes_v6e.json (MaxText's
Trillium recipes in AI-Hypercomputer/tpu-recipes, their published "completed step" times, and
their compiles here); every error and error band is derived, never typed in. Re-record after a
MaxText/libtpu upgrade with `python -m benchmarks.published_recipes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from domain.perf.multislice_runs import dcn_bands, dcn_term
from domain.perf.published_recipes import PublishedRun, published_runs
from domain.perf.step_time import Anchor, Hardware, SpeedModel
from domain.tpu.tpu_catalog import accelerator

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
    dcn_bytes_per_second=accelerator("v6e").dcn_bytes_per_second_per_chip,
    host_bytes_per_second=64e9,  # PCIe Gen5 (Google's v6e page) x16, one direction
)


def anchor(run: PublishedRun) -> Anchor | None:
    """The run as an anchor: its compile as published, else the changed one that fits; None when
    neither gave a profile (it does not compile here)."""
    compiled = run.predicted_from
    if compiled is None or compiled.profile is None or run.family is None:
        return None
    return Anchor(
        name=run.name,
        family=run.family,
        published_step_seconds=run.published_step_seconds,
        calibrated=run.calibrates,
        profile=compiled.profile,
        slices=run.slices,
        changed=dict(compiled.changed),
    )


V6E_ANCHORS = tuple(found for run in published_runs() if (found := anchor(run)) is not None)

SPEED_MODELS: Mapping[str, SpeedModel] = MappingProxyType(
    {"v6e": SpeedModel(V6E, V6E_ANCHORS, dcn=dcn_term(), dcn_bands=dcn_bands())}
)


def speed_model(generation: str) -> SpeedModel | None:
    """The calibrated model of a TPU generation, or None when no anchor calibrates one."""
    return SPEED_MODELS.get(generation)
