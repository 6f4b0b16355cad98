"""Compile every published anchor of the speed model and compare its prediction with the
published TPU step time.

Run: `.venv/bin/python -m benchmarks.speed_anchors [--no-cache] [NAME ...]` (after
./scripts/setup; about 20 s per anchor on 2 cores, cached afterwards). Prints, per anchor,
the profile to record in domain/speed_anchors.py, then a table: published step time, predicted,
error, and whether the anchor calibrates the model or is only checked. The overhead in the table
is the one the freshly compiled profiles give.
"""

from __future__ import annotations

import argparse
import dataclasses

from domain.speed_anchors import SPEED_MODELS
from domain.step_time import SpeedModel
from trainer.fit_check import anchor_job, run_fit_check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("names", nargs="*", help="anchors to compile (default: all)")
    args = parser.parse_args()
    for model in SPEED_MODELS.values():
        anchors = []
        for anchor in model.anchors:
            if args.names and anchor.name not in args.names:
                anchors.append(anchor)
                continue
            result = run_fit_check(anchor_job(anchor), use_cache=not args.no_cache, extra_flags=anchor.extra_flags)
            if result.profile is None:
                raise SystemExit(f"{anchor.name}: no profile ({result.message or 'the compile dumped no HLO'})")
            profile = type(anchor.profile).from_json(result.profile)
            print(f"# {anchor.name}: {result.total_gib:.2f} GiB per chip")
            print(f"profile={profile!r},")
            anchors.append(dataclasses.replace(anchor, profile=profile))
        fresh = SpeedModel(model.hardware, tuple(anchors))
        print(f"\n{model.hardware.generation}: overhead {fresh.overhead:.4f}")
        print("| anchor | slice | published s/step | predicted | error | used to |")
        print("|---|---|---|---|---|---|")
        for anchor in fresh.anchors:
            print(
                f"| `{anchor.name}` | {anchor.slices} x {anchor.topology} | {anchor.published_step_seconds:.3f} | "
                f"{fresh.predicted_step_seconds(anchor):.3f} | {fresh.error_percent(anchor):+.1f}% | "
                f"{'calibrate' if anchor.calibrated else 'check'} |"
            )


if __name__ == "__main__":
    main()
