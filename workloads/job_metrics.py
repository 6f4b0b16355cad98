"""What a MaxText job's log says about its progress: steps, loss and throughput.

MaxText prints one line per step, for example
`completed step: 99, seconds: 0.693, TFLOP/s/device: 83.171, Tokens/s/device: 11819.175,
total_weights: 262144, loss: 0.334`; everything here is parsed from those lines.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

STEP_LINE = re.compile(
    r"completed step: (?P<step>\d+), seconds: (?P<seconds>[\d.]+), "
    r"TFLOP/s/device: (?P<tflops>[\d.]+), Tokens/s/device: (?P<tokens>[\d.]+), "
    r"total_weights: \d+, loss: (?P<loss>[-+\w.]+)"
)


@dataclass(frozen=True)
class StepMetrics:
    step: int
    seconds: float
    tflops_per_device: float
    tokens_per_second_per_device: float
    loss: float


# Ray echoes the job's command at the top of its log; that line is not a step.
ENTRYPOINT_ECHO = "Running entrypoint for job"


def parse_steps(log: str) -> list[StepMetrics]:
    lines = "\n".join(line for line in log.splitlines() if not line.startswith(ENTRYPOINT_ECHO))
    return [
        StepMetrics(
            step=int(match["step"]),
            seconds=float(match["seconds"]),
            tflops_per_device=float(match["tflops"]),
            tokens_per_second_per_device=float(match["tokens"]),
            loss=float(match["loss"]),
        )
        for match in STEP_LINE.finditer(lines)
    ]


def summarize(log: str) -> dict[str, float | int | None]:
    """Steps completed, the final loss and steady-state throughput (the median over all steps
    but the first, which includes XLA compilation)."""
    steps = parse_steps(log)
    if not steps:
        return {
            "steps_completed": 0,
            "final_loss": None,
            "tokens_per_second_per_device": None,
            "tflops_per_device": None,
        }
    steady = steps[1:] or steps
    return {
        "steps_completed": max(step.step for step in steps) + 1,
        "final_loss": steps[-1].loss,
        "tokens_per_second_per_device": round(
            statistics.median(step.tokens_per_second_per_device for step in steady), 3
        ),
        "tflops_per_device": round(statistics.median(step.tflops_per_device for step in steady), 3),
    }
