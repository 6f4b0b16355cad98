"""How long the infra program takes to evaluate under Pulumi mocks as the slice count grows.

Run: `.venv/bin/python -m benchmarks.infra_mocks` (after ./scripts/setup). Not a timed test:
it prints a table; 64 slices should stay well under 10 s and time should grow linearly.
The first evaluation pays for importing the SDKs and is measured apart as a warm-up.
"""

from __future__ import annotations

import statistics
import time

from domain.paths import INFRA_PROJECT
from infra.config import read_settings
from infra.program import build
from policies.mock_engine import run_program, stack_config

SLICE_COUNTS = (1, 2, 8, 32, 64)
REPEATS = 3


def evaluate(slices: int) -> tuple[float, int]:
    config = stack_config("dev")
    config[f"{INFRA_PROJECT}:slices"] = slices
    started = time.perf_counter()
    run = run_program(lambda: build(read_settings()), config)
    return time.perf_counter() - started, len(run.registrations)


def main() -> None:
    warm_up, _ = evaluate(1)
    print(f"warm-up (imports included): {warm_up:.2f} s")
    print(f"{'slices':>6} {'resources':>9} {'median s':>9} {'ms/resource':>11}")
    for slices in SLICE_COUNTS:
        timings = []
        for _ in range(REPEATS):
            seconds, resources = evaluate(slices)
            timings.append(seconds)
        median = statistics.median(timings)
        print(f"{slices:>6} {resources:>9} {median:>9.3f} {1000 * median / resources:>11.2f}")


if __name__ == "__main__":
    main()
