"""Compile every published v6e MaxText run with the fit check and record what it says in
domain/perf/tpu_recipes_v6e.json: whether it fits, its sizes, MaxText's count of its tokens and FLOPs,
and the profile the speed model reads. A run that does not fit as published and offloads its
output projection is compiled again with it recomputed (domain/perf/published_recipes.py).

Run after a MaxText or libtpu upgrade, then `python -m benchmarks.speed_report` for the tables
in docs/capacity.md:

    .venv/bin/python -m benchmarks.published_recipes [--no-cache] [RECIPE ...]

About 15 to 120 s per compile on 2 cores (cached afterwards, by configuration).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

from domain.paths import PROJECT_ROOT
from domain.perf.published_recipes import OUT_PROJ_RECOMPUTED, RECIPES_FILE, PublishedRun, load
from trainer.fit_check import FitResult, published_job, run_fit_check


def pinned(package: str) -> str:
    lock = (PROJECT_ROOT / "requirements-trainer.txt").read_text()
    found = re.search(rf"^{re.escape(package)}==(\S+)", lock, re.MULTILINE)
    return found.group(1) if found else "unknown"


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def recorded(result: FitResult, changed: dict[str, str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "fits": result.fits,
        "total_gib": rounded(result.total_gib),
        "argument_gib": rounded(result.argument_gib),
        "temp_gib": rounded(result.temp_gib),
    }
    if changed:
        data["changed"] = changed
    if result.fits:
        data |= {
            "tokens_per_chip": result.tokens_per_chip,
            "model_flops_per_chip": result.model_flops_per_chip,
            "profile": result.profile,
        }
    return data | {"maxtext": pinned("maxtext"), "jax": pinned("jax"), "libtpu": pinned("libtpu")}


def fit_check(run: PublishedRun, *, changed: dict[str, str] | None, use_cache: bool) -> FitResult:
    job, flags = published_job(run, changed)
    started = time.monotonic()
    result = run_fit_check(job, use_cache=use_cache, extra_flags=flags)
    verdict = "fits" if result.fits else "does not fit"
    total = f"{result.total_gib:.2f} GiB" if result.total_gib is not None else "no size"
    print(
        f"{run.name}{' with ' + str(changed) if changed else ''}: {verdict}, {total}, "
        f"{time.monotonic() - started:.0f} s",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("recipes", nargs="*", help="recipe names to compile (default: all)")
    args = parser.parse_args()
    data = json.loads(RECIPES_FILE.read_text())
    for entry, run in zip(data["recipes"], load(RECIPES_FILE.read_text()), strict=True):
        if args.recipes and run.recipe not in args.recipes:
            continue
        if not run.tuning_params or not run.model_type:
            continue  # the recipe's README quotes no MaxText settings to compile
        result = fit_check(run, changed=None, use_cache=not args.no_cache)
        entry["compiled_here"] = recorded(result)
        entry.pop("compiled_changed", None)
        if not result.fits and run.tuning_params.get("out_proj") == "offload":
            changed = dict(OUT_PROJ_RECOMPUTED)
            entry["compiled_changed"] = recorded(fit_check(run, changed=changed, use_cache=not args.no_cache), changed)
        RECIPES_FILE.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
