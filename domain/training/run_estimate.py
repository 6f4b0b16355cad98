"""What the stack predicted of a run, handed to the RayJob so the run's page and TensorBoard
events put the measurement beside it: the step time with its error band, the MFU, and the price
the measured cost is counted at. None of it defines the job (a new calibration is not a new run)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class RunEstimate:
    """The estimate, each field None where the stack has none (a CPU job has no prediction, a
    stack without a price no dollars)."""

    # Where the step time comes from: the fit check's prediction, or an assumed MFU.
    source: str | None = None
    step_seconds: float | None = None
    # The step times the prediction's error band allows, and the band in words (or "uncalibrated").
    step_seconds_low: float | None = None
    step_seconds_high: float | None = None
    band: str | None = None
    mfu: float | None = None
    # One chip's peak bf16 TFLOP/s: a measured TFLOP/s per device over it is the measured MFU.
    peak_tflops_per_chip: float | None = None
    # The job's chips at their hourly price, and the whole job's predicted dollars.
    dollars_per_hour: float | None = None
    job_dollars: float | None = None

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> RunEstimate:
        return cls(**{f.name: props.get(f.name) for f in fields(cls)})

    def to_props(self) -> dict[str, Any]:
        return asdict(self)

    def measured_mfu(self, tflops_per_device: float) -> float | None:
        if not self.peak_tflops_per_chip:
            return None
        return tflops_per_device / self.peak_tflops_per_chip
