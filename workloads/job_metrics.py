"""What a MaxText job's log says about its progress: steps, loss and throughput.

MaxText prints one line per step, for example
`completed step: 99, seconds: 0.693, TFLOP/s/device: 83.171, Tokens/s/device: 11819.175,
total_weights: 262144, loss: 0.334`; everything here is parsed from those lines. A log is read
as it is: a line whose numbers do not read (`loss: -`, `seconds: 1.2.3`, a cut line) is no step,
and no line can make the parsing raise.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import deque
from dataclasses import dataclass

from domain.goodput import ENTRYPOINT_ECHO, STEP_NUMBER, finite

STEP_LINE = re.compile(
    rf"completed step: (?P<step>{STEP_NUMBER}), seconds: (?P<seconds>[0-9.]+), "
    r"TFLOP/s/device: (?P<tflops>[0-9.]+), Tokens/s/device: (?P<tokens>[0-9.]+), "
    # The loss as Python prints a float, `nan` and `inf` included (a diverged run).
    r"total_weights: [0-9]+, loss: (?P<loss>[-+\w.]+)"
)


@dataclass(frozen=True)
class StepMetrics:
    step: int
    seconds: float
    tflops_per_device: float
    tokens_per_second_per_device: float
    loss: float  # may be nan or inf: the run diverged

    @property
    def throughput(self) -> tuple[float, float] | None:
        """(tokens/s, TFLOP/s) per device, when both are finite numbers."""
        sample = (self.tokens_per_second_per_device, self.tflops_per_device)
        return sample if all(math.isfinite(value) for value in sample) else None


def _step(match: re.Match[str]) -> StepMetrics | None:
    try:
        return StepMetrics(
            step=int(match["step"]),
            seconds=float(match["seconds"]),
            tflops_per_device=float(match["tflops"]),
            tokens_per_second_per_device=float(match["tokens"]),
            loss=float(match["loss"]),
        )
    except ValueError:  # "1.2.3", "-", "abc"
        return None


def parse_steps(log: str) -> list[StepMetrics]:
    lines = "\n".join(line for line in log.splitlines() if not line.startswith(ENTRYPOINT_ECHO))
    return [step for match in STEP_LINE.finditer(lines) if (step := _step(match)) is not None]


# Throughput medians are taken over at most this many steps (the latest seen), so what the
# provider keeps does not grow with the run.
MEDIAN_WINDOW_STEPS = 1000


class StepCollector:
    """Metrics from successive reads of a log's tail, in bounded memory.

    Reads overlap (each is the log's last lines), so a step is counted once: only steps past the
    highest one seen so far join the throughput samples, and step 0 (it includes XLA compilation)
    never does, so a run seen only at step 0 has no throughput. The final loss is the last step
    line of the latest read, even after an elastic restart set the step count back.
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
                if step.step > 0 and (sample := step.throughput) is not None:
                    self._samples.append(sample)
                self.highest_step = step.step
        self.latest = steps[-1]

    def summary(self) -> dict[str, float | int | bool | None]:
        """The metrics outputs. Every number is finite or None (strict JSON): a last loss that
        is not finite is `final_loss` None with `diverged` True."""
        if self.latest is None:
            return {
                "steps_completed": 0,
                "final_loss": None,
                "diverged": None,
                "tokens_per_second_per_device": None,
                "tflops_per_device": None,
            }
        samples = list(self._samples)
        diverged = not math.isfinite(self.latest.loss)
        return {
            "steps_completed": self.highest_step + 1,
            "final_loss": None if diverged else self.latest.loss,
            "diverged": diverged,
            "tokens_per_second_per_device": finite(statistics.median(s[0] for s in samples), 3) if samples else None,
            "tflops_per_device": finite(statistics.median(s[1] for s in samples), 3) if samples else None,
        }
