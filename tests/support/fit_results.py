"""Fit-check results built for the page tests (tests/test_fit_page.py, tests/test_pages_in_browser.py):
one that fits, predicted from a published run's compiled profile, and one that does not."""

from __future__ import annotations

from domain.perf import fit_results
from domain.perf.fit_results import FitResult
from domain.perf.published_recipes import published_runs
from tests.support.anchors import CALIBRATING_8B


def fitting(model_name: str = "llama3-8b", **maxtext: str) -> FitResult:
    """A 70B-like step that fits, with the calibrating 8B run's compiled profile to predict from."""
    [run] = [r for r in published_runs() if r.name == CALIBRATING_8B]
    compiled = run.compiled
    assert compiled is not None
    return FitResult(
        fits=True,
        slice_type="v6e-16",
        slices=2,
        chips=32,
        usable_gib=31.24,
        argument_gib=12.3276,
        temp_gib=11.3795,
        output_gib=12.3275,
        alias_gib=12.3274,
        total_gib=23.7071,
        generation="v6e",
        tokens_per_chip=compiled.tokens_per_chip,
        model_flops_per_chip=compiled.model_flops_per_chip,
        model_flops_source="maxtext",
        profile=compiled.profile.to_json(),
        compiled_through=fit_results.BUFFER_ASSIGNMENT,
        compile_seconds=4.9,
        configuration={"maxtext": {"model_name": model_name, "weight_dtype": "bfloat16", **maxtext}},
    )


# The published 8B v6e-8 recipe as this MaxText compiles it (tests/test_fit_check.py): over by 1.68 GiB.
NOT_FITTING = FitResult(
    fits=False,
    slice_type="v6e-8",
    slices=1,
    chips=8,
    usable_gib=31.24,
    argument_gib=11.22,
    temp_gib=21.70,
    output_gib=11.22,
    alias_gib=11.22,
    total_gib=32.92,
    message="RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: ... exceeds available HBM (31.24G)",
    configuration={
        "maxtext": {
            "model_name": "llama3.1-8b",
            "per_device_batch_size": "3",
            "remat_policy": "custom",
            "query_proj": "offload",
            "out_proj": "offload",
        }
    },
)
