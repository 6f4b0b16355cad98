"""What a MaxText job's log says about its progress: steps, loss and throughput.

MaxText prints one line per step, for example
`completed step: 99, seconds: 0.693, TFLOP/s/device: 83.171, Tokens/s/device: 11819.175,
total_weights: 262144, loss: 0.334`; everything here is parsed from those lines.
"""

from __future__ import annotations

import re
import statistics
from collections import deque
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


# Throughput medians are taken over at most this many steps (the latest seen), so what the
# provider keeps does not grow with the run.
MEDIAN_WINDOW_STEPS = 1000


class StepCollector:
    """Metrics from successive reads of a log's tail, in bounded memory.

    Reads overlap (each is the log's last lines), so a step is counted once: only steps past the
    highest one seen so far join the throughput samples, and step 0 (it includes XLA compilation)
    never does. The final loss is the last step line of the latest read, even after an elastic
    restart set the step count back.
    """

    def __init__(self, window: int = MEDIAN_WINDOW_STEPS):
        self.latest: StepMetrics | None = None
        self.highest_step = -1
        self._samples: deque[tuple[float, float]] = deque(maxlen=window)

    def add(self, text: str) -> None:
        steps = parse_steps(text)
        if not steps:
            return
        for step in steps:
            if step.step > self.highest_step:
                if step.step > 0:
                    self._samples.append((step.tokens_per_second_per_device, step.tflops_per_device))
                self.highest_step = step.step
        self.latest = steps[-1]

    def summary(self) -> dict[str, float | int | None]:
        if self.latest is None:
            return {
                "steps_completed": 0,
                "final_loss": None,
                "tokens_per_second_per_device": None,
                "tflops_per_device": None,
            }
        samples = list(self._samples) or [(self.latest.tokens_per_second_per_device, self.latest.tflops_per_device)]
        return {
            "steps_completed": self.highest_step + 1,
            "final_loss": self.latest.loss,
            "tokens_per_second_per_device": round(statistics.median(s[0] for s in samples), 3),
            "tflops_per_device": round(statistics.median(s[1] for s in samples), 3),
        }
