"""What a start from zero costs before the first step, phase by phase, in seconds and in dollars
(seconds x the job's chips x the price per chip-hour: the slices are billed from the moment their
nodes exist). Two cases:

- cold: nothing cached. The slices' nodes boot, each pulls the worker image whole, and MaxText
  compiles the train step with no compilation-cache entry;
- warm: the slices still boot, but the image is streamed (GKE image streaming) and the compile is
  served by the persistent compilation cache.

Node boot and image pull come from published figures, declared once below with their sources
and what makes each an assumption for this stack. The compile is the fit check's own measurement
of this configuration's whole compile when one exists (`python -m trainer.fit_check
--full-compile`), else unknown; its warm figure applies the published cache speed-up to it. A
slice kept up by the idle timeout pays none of this: these are the figures to weigh
`idleTimeoutSeconds` (and `minSlices`) against. Not estimated here: MaxText's set-up, the restore
and the first step (the job measures every phase as it runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SECONDS_PER_HOUR = 3600

EstimatedPhase = Literal["node_boot", "image_pull", "compile"]
ESTIMATED_PHASES: tuple[EstimatedPhase, ...] = ("node_boot", "image_pull", "compile")


@dataclass(frozen=True)
class PublishedFigure:
    """A measurement someone published, and why it is only an assumption for this stack."""

    seconds: float
    what: str
    source: str
    assumption: str


# Assumed, with no TPU figure found: a GKE-autoscaled accelerator VM (a GPU node) came up 4.5
# minutes after the autoscaler asked for it. A multi-host TPU slice comes up as one unit.
NODE_BOOT = PublishedFigure(
    seconds=270.0,
    what="a GKE node pool's accelerator VM up 4.5 minutes after the cluster autoscaler asked for it",
    source="https://github.com/codalab/codalab-worksheets/issues/4042",
    assumption="assumed: a GPU node, not a TPU slice; no published boot time of a TPU VM or slice was found",
)
# GKE's own AI-on-GKE best practices: NVIDIA Triton Server, a 5.4 GB image, from the workload's
# creation to serving, 191 s pulled whole and 30 s with image streaming.
IMAGE_PULL_WHOLE = PublishedFigure(
    seconds=191.0,
    what="a 5.4 GB image (NVIDIA Triton Server) from the workload's creation to serving, pulled whole",
    source="https://github.com/GoogleCloudPlatform/ai-on-gke/blob/main/best-practices/startup-latency.md",
    assumption="assumed: the worker image (Ray, JAX, libtpu, MaxText) is of that size; the figure includes "
    "the server's own start",
)
IMAGE_PULL_STREAMED = PublishedFigure(
    seconds=30.0,
    what="the same 5.4 GB image with GKE image streaming",
    source=IMAGE_PULL_WHOLE.source,
    assumption=IMAGE_PULL_WHOLE.assumption,
)
# A JAX program on TPU v6e: 190 s with no compilation cache, 97 s with a warm cache read from a
# Cloud Storage bucket (the figure issue 33 quotes; its primary source was not found in stored
# material). Applied to the compile alone as a ratio.
COMPILE_WITHOUT_CACHE = PublishedFigure(
    seconds=190.0,
    what="a JAX program on TPU v6e with no compilation cache",
    source="figure quoted in issue 33 (primary source not found)",
    assumption="assumed: the whole program's speed-up (97 s / 190 s) holds for the train step's compile",
)
COMPILE_WARM_CACHE = PublishedFigure(
    seconds=97.0,
    what="the same program with a warm compilation cache read from a Cloud Storage bucket",
    source=COMPILE_WITHOUT_CACHE.source,
    assumption=COMPILE_WITHOUT_CACHE.assumption,
)
WARM_COMPILE_FRACTION = COMPILE_WARM_CACHE.seconds / COMPILE_WITHOUT_CACHE.seconds


@dataclass(frozen=True)
class PhaseCost:
    """One phase of a start from zero: seconds and dollars cold and warm (None: unknown, or no
    price), and where the figures come from."""

    phase: EstimatedPhase
    cold_seconds: float | None
    warm_seconds: float | None
    cold_dollars: float | None
    warm_dollars: float | None
    basis: str


@dataclass(frozen=True)
class ColdStartCost:
    """Every estimated phase, and their sums over the phases with a figure (`unknown` names the
    others: the sums leave them out)."""

    phases: tuple[PhaseCost, ...]
    cold_seconds: float
    warm_seconds: float
    cold_dollars: float | None
    warm_dollars: float | None
    unknown: tuple[EstimatedPhase, ...]

    def basis(self) -> str:
        known = [phase.phase for phase in self.phases if phase.phase not in self.unknown]
        said = f"{', '.join(known)} (cold and warm)"
        if self.unknown:
            said += f"; without {', '.join(self.unknown)}, unknown: " + "; ".join(
                phase.basis for phase in self.phases if phase.phase in self.unknown
            )
        return said


def _dollars(seconds: float | None, chips: int, price_per_chip_hour_usd: float | None) -> float | None:
    if seconds is None or price_per_chip_hour_usd is None:
        return None
    return round(seconds * chips * price_per_chip_hour_usd / SECONDS_PER_HOUR, 2)


def _phase(
    phase: EstimatedPhase,
    cold: float | None,
    warm: float | None,
    basis: str,
    chips: int,
    price: float | None,
) -> PhaseCost:
    return PhaseCost(
        phase=phase,
        cold_seconds=cold,
        warm_seconds=warm,
        cold_dollars=_dollars(cold, chips, price),
        warm_dollars=_dollars(warm, chips, price),
        basis=basis,
    )


def _cited(figure: PublishedFigure) -> str:
    return f"{figure.seconds:g} s: {figure.what} ({figure.source}; {figure.assumption})"


def cold_start_cost(
    *,
    chips: int,
    price_per_chip_hour_usd: float | None,
    compile_seconds: float | None,
    compile_basis: str,
) -> ColdStartCost:
    """A start from zero of a job on `chips` chips, cold and warm. `compile_seconds` is the train
    step's whole compile as measured (None: unknown, `compile_basis` says why)."""
    if chips <= 0:
        raise ValueError(f"chips = {chips}: a start from zero is costed for a job on at least one chip")
    if compile_seconds is not None and compile_seconds < 0:
        raise ValueError(f"compile_seconds = {compile_seconds}: a compile takes zero seconds or more")
    price = price_per_chip_hour_usd
    warm_compile = round(compile_seconds * WARM_COMPILE_FRACTION, 1) if compile_seconds is not None else None
    phases = (
        _phase("node_boot", NODE_BOOT.seconds, NODE_BOOT.seconds, _cited(NODE_BOOT), chips, price),
        _phase(
            "image_pull",
            IMAGE_PULL_WHOLE.seconds,
            IMAGE_PULL_STREAMED.seconds,
            f"cold {_cited(IMAGE_PULL_WHOLE)}; warm {_cited(IMAGE_PULL_STREAMED)}",
            chips,
            price,
        ),
        _phase(
            "compile",
            compile_seconds,
            warm_compile,
            compile_basis
            if compile_seconds is None
            else f"cold {compile_basis}; warm x {WARM_COMPILE_FRACTION:.3f} ({_cited(COMPILE_WARM_CACHE)} "
            f"against {COMPILE_WITHOUT_CACHE.seconds:g} s without)",
            chips,
            price,
        ),
    )
    cold = sum(phase.cold_seconds for phase in phases if phase.cold_seconds is not None)
    warm = sum(phase.warm_seconds for phase in phases if phase.warm_seconds is not None)
    return ColdStartCost(
        phases=phases,
        cold_seconds=round(cold, 1),
        warm_seconds=round(warm, 1),
        cold_dollars=_dollars(cold, chips, price),
        warm_dollars=_dollars(warm, chips, price),
        unknown=tuple(phase.phase for phase in phases if phase.cold_seconds is None),
    )
