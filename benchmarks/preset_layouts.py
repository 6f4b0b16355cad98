"""The layouts tried for the presets, as docs/capacity.md prints them between its `preset-layouts`
markers ("The presets, tuned for speed"; tests/test_preset_layouts.py holds the page to this output):

    .venv/bin/python -m benchmarks.preset_layouts

Reads only recorded data (domain/perf/preset_layouts.json): every prediction is derived at print
time from each compile's recorded profile through the current speed model, so a model change
re-derives the table. After a MaxText or libtpu upgrade, compile the layouts again first (about
15 to 45 s each on 2 cores, cached afterwards by configuration):

    .venv/bin/python -m benchmarks.preset_layouts --compile [--no-cache] [LABEL ...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from domain.perf.fit_results import FitResult, fit_check_job
from domain.perf.hlo_profile import StepProfile
from domain.perf.preset_layouts import LAYOUTS_FILE, PROCEDURE_FLAGS, Layout, LayoutCompile, PresetLayouts, load
from domain.tpu.tpu_catalog import (
    DATA_PARALLEL_OVERLAP,
    DENSE_VMEM_LIMIT,
    HOST_OFFLOAD,
    REFERENCE_REGION,
    Accelerator,
    accelerator,
    accelerator_by_ray_type,
)

BEGIN, END = "<!-- preset-layouts -->", "<!-- /preset-layouts -->"
# The procedure's scoped VMEM limit, which the recipe's dense limit (DENSE_VMEM_LIMIT) replaces.
PROCEDURE_VMEM_LIMIT = "--xla_tpu_scoped_vmem_limit_kib=122880"


def procedure_flags(acc: Accelerator) -> str:
    """The workers' LIBTPU_INIT_ARGS without MaxText's recipe flag groups, with the procedure's
    VMEM limit: the flags the procedure's job commands compiled with (less the one libtpu refuses)."""
    recipe_groups = set(DENSE_VMEM_LIMIT) | set(DATA_PARALLEL_OVERLAP) | set(HOST_OFFLOAD)
    kept = [flag for flag in acc.libtpu_init_args().split() if flag not in recipe_groups]
    return " ".join([PROCEDURE_VMEM_LIMIT, *kept])


def compiled(layout: Layout, *, use_cache: bool) -> LayoutCompile:
    """The fit check's compile of `layout` (trainer.fit_check.run_fit_check, with the workers'
    flags or, for PROCEDURE_FLAGS, the procedure's instead)."""
    from trainer import fit_check  # the trainer's compile; the table itself needs none of it

    job = fit_check_job(layout.preset, overrides=layout.overrides)
    started = time.monotonic()
    base = None
    if layout.flags == PROCEDURE_FLAGS:
        base = procedure_flags(accelerator_by_ray_type(job.accelerator_type or ""))
    result = fit_check.run_fit_check(job, use_cache=use_cache, base_flags=base)
    verdict = "fits" if result.fits else "does not fit"
    total = f"{result.total_gib:.2f} GiB" if result.total_gib is not None else "no size"
    print(f"{layout.label}: {verdict}, {total}, {time.monotonic() - started:.0f} s", flush=True)
    return recorded(result)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def recorded(result: FitResult) -> LayoutCompile:
    if result.fits and result.profile is None:
        raise ValueError(f"the compile fits but recorded no profile: {result.missing_prediction}")
    return LayoutCompile(
        fits=result.fits,
        usable_gib=round(result.usable_gib, 2),
        total_gib=_rounded(result.total_gib),
        argument_gib=_rounded(result.argument_gib),
        slices=int(result.configuration["slices"]),
        maxtext=dict(result.configuration["maxtext"]),
        tokens_per_chip=result.tokens_per_chip if result.fits else None,
        model_flops_per_chip=result.model_flops_per_chip if result.fits else None,
        profile=StepProfile.from_json(result.profile) if result.fits and result.profile else None,
    )


def _label(layout: Layout) -> str:
    return f"**{layout.label}: `{layout.preset}`**" if layout.shipped else layout.label


def _row(layout: Layout, generation: str, price: float) -> str:
    compile_ = layout.compiled
    if compile_ is None:
        return f"| {_label(layout)} | not compiled | | | | | |"
    prediction = compile_.prediction(generation)
    if not compile_.fits or prediction is None:
        size = f"{compile_.total_gib:.2f} GiB in all" if compile_.total_gib is not None else "no size"
        verdict = "does not fit" if not compile_.fits else "no prediction"
        return f"| {_label(layout)} | {size} | {verdict} | | | | |"
    dcn = f"{100 * prediction.multislice.share:.1f}%" if prediction.multislice is not None else "-"
    per_million = price / (prediction.tokens_per_second_per_chip * 3600) * 1e6
    return (
        f"| {_label(layout)} | {compile_.total_gib:.2f} GiB ({compile_.headroom_percent:.1f}%) "
        f"| {prediction.step_seconds:.3f} s | {dcn} | {prediction.tokens_per_second_per_chip:,.0f} "
        f"| {100 * prediction.mfu:.1f}% | ${per_million:.3f} |"
    )


def table(layouts: PresetLayouts) -> list[str]:
    acc = accelerator(layouts.generation)
    price = acc.price_per_chip_hour_usd
    slices = sorted({layout.compiled.slices for layout in layouts.layouts if layout.compiled is not None})
    on = " or ".join(str(n) for n in slices) or "?"
    return [
        f"Every layout on {on} x {layouts.generation}-16, predicted from its recorded compile by the current "
        f"speed model; $ per million tokens at the {layouts.generation} on-demand list price, "
        f"${price:.2f} per chip-hour ({REFERENCE_REGION}). DCN: the share of the step the transfers across "
        "slices take.",
        "",
        "| configuration | per chip (headroom) | predicted step | DCN | tokens/s/chip | MFU | $ per M tokens |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
        *(_row(layout, layouts.generation, price) for layout in layouts.layouts),
    ]


def report(layouts: PresetLayouts | None = None) -> str:
    """What docs/capacity.md holds between its markers (the recorded layouts unless given others)."""
    return "\n".join(table(layouts if layouts is not None else load()))


def compile_all(labels: Sequence[str], *, use_cache: bool) -> None:
    layouts = load()
    done = list(layouts.layouts)
    for index, layout in enumerate(done):
        if labels and layout.label not in labels:
            continue
        done[index] = Layout(
            label=layout.label,
            preset=layout.preset,
            overrides=layout.overrides,
            flags=layout.flags,
            shipped=layout.shipped,
            compiled=compiled(layout, use_cache=use_cache),
        )
        LAYOUTS_FILE.write_text(PresetLayouts(layouts.generation, tuple(done)).to_json())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true", help="compile the layouts again and record them")
    parser.add_argument("--no-cache", action="store_true", help="with --compile: compile even when cached")
    parser.add_argument("labels", nargs="*", help="with --compile: the labels to compile (default: all)")
    args = parser.parse_args(argv)
    if args.compile:
        compile_all(args.labels, use_cache=not args.no_cache)
    print(BEGIN)
    print(report())
    print(END)


if __name__ == "__main__":
    main()
