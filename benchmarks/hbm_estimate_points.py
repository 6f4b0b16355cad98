"""Compile every point of domain/perf/hbm_estimate_points.json with the fit check (the TPU workers'
flags) and record the compiler's per-chip arguments, temporaries, outputs, aliased bytes and
total there, with the MaxText, JAX and libtpu versions they were measured on. The analytic
estimate's working-set constants (domain/perf/capacity.py) are fitted to these points; a test fails
when the constants are not what the recorded points give (domain/perf/hbm_estimate.py).

Run after a MaxText or libtpu upgrade, or after adding a point, then refit:

    .venv/bin/python -m benchmarks.hbm_estimate_points [--no-cache] [NAME ...]
    .venv/bin/python -m benchmarks.hbm_estimate_points --report   # no compile: the fit and the table

About 15 to 60 s per compile on 2 cores (cached afterwards, by configuration).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchmarks.published_recipes import pinned
from domain.perf.hbm_estimate import (
    BEGIN,
    END,
    POINTS_FILE,
    declared_factors,
    error_table,
    fit_working_set,
    job_of,
    load_points,
    max_error_gib,
)
from domain.perf.published_recipes import Compiled
from trainer.fit_check import FitResult, libtpu_flags, run_fit_check

DIGITS = 3  # GiB to the MiB: finer than the estimate's error by three orders of magnitude


def sizes(result: FitResult) -> dict[str, Any]:
    """What the fit check measured; it fails rather than record a compile without sizes."""
    measured = (result.argument_gib, result.temp_gib, result.output_gib, result.alias_gib, result.total_gib)
    if any(value is None for value in measured):
        raise RuntimeError(f"the compile reported no buffer sizes: {result.message or 'no message'}")
    argument, temp, output, alias, total = (round(float(value), DIGITS) for value in measured)  # type: ignore[arg-type]
    return {
        "fits": result.fits,
        "argument_gib": argument,
        "temp_gib": temp,
        "output_gib": output,
        "alias_gib": alias,
        "total_gib": total,
        "usable_gib": result.usable_gib,
    }


def report() -> None:
    """The least-squares constants of the recorded points beside the declared ones, and the
    table for docs/capacity.md (with the declared constants)."""
    points = load_points()
    fit = fit_working_set(points)
    print(
        f"fitted: WORKING_SET_ACTIVATION_FACTOR = {fit.activation_factor:.4f}, "
        f"WORKING_SET_FP32_CAST_FACTOR = {fit.fp32_cast_factor:.4f} (declared in domain/perf/capacity.py: "
        f"{', '.join(map(str, declared_factors()))}; rounded fit: {', '.join(map(str, fit.rounded))})"
    )
    print(f"largest error of the declared constants: {max_error_gib(points):.2f} GiB")
    print(BEGIN)
    print(error_table(points))
    print(END)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-cache", action="store_true", help="compile even when a result is cached")
    parser.add_argument("--report", action="store_true", help="compile nothing: print the fit and the table")
    parser.add_argument("names", nargs="*", help="names of the points to compile (default: all)")
    args = parser.parse_args()
    if args.report:
        report()
        return
    data = json.loads(POINTS_FILE.read_text())  # the document each point's result is written into
    points = load_points()
    unknown = set(args.names) - {point.name for point in points}
    if unknown:
        parser.error(f"no such point: {', '.join(sorted(unknown))}; points: {', '.join(p.name for p in points)}")
    for entry, point in zip(data["points"], points, strict=True):
        if args.names and point.name not in args.names:
            continue
        job = job_of(point)
        started = time.monotonic()
        result = run_fit_check(job, use_cache=not args.no_cache)
        measured = sizes(result)
        entry["compiled"] = measured | {
            "libtpu_init_args": libtpu_flags(job),
            "maxtext": pinned("maxtext"),
            "jax": pinned("jax"),
            "libtpu": pinned("libtpu"),
        }
        # As load_points will read them: rounded to DIGITS.
        argument, total = Compiled.from_json(measured).sizes_gib()
        print(
            f"{point.name}: {'fits' if result.fits else 'does not fit'}, arguments {argument} "
            f"+ temporaries {total - argument:.3f} = total {total} GiB, {time.monotonic() - started:.0f} s",
            flush=True,
        )
        POINTS_FILE.write_text(json.dumps(data, indent=1) + "\n")  # after each point: a long run keeps what it measured
    report()


if __name__ == "__main__":
    main()
