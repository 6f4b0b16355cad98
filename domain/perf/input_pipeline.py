"""How fast a job's input pipeline must be: the tokens per second each host's data pipeline must
deliver so that a training step never waits for its batch, and the Grain workers that takes.

    needed per host = tokens per step (all chips) / predicted step seconds / hosts
    workers         = ceil(needed per host x headroom / tokens per second of one worker)

The step seconds are the speed model's prediction for the job (domain/perf/step_time.py, from
its fit check); the rate of one worker is measured (benchmarks/input_pipeline.py). Each host
loads its own share of the global batch (MaxText: `global_batch_size_to_load` over the process
count, one process per TPU VM), so the need is per host. docs/training.md, "Input pipeline
speed", has both sides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from domain.training.job import JobSpec

# Above the bare need: the training process shares the host's CPUs with the data workers, and
# a corpus of longer documents costs more tokenizer work per token kept (MaxText tokenizes a
# whole document, then trims it to max_target_length).
HEADROOM = 2.0


def tokens_per_second_per_host(tokens_per_step: float, step_seconds: float, hosts: int) -> float:
    """The tokens each host must deliver per second for steps of `step_seconds` that each
    consume `tokens_per_step` tokens across `hosts` hosts."""
    if tokens_per_step <= 0 or step_seconds <= 0 or hosts < 1:
        raise ValueError(
            f"tokens per step ({tokens_per_step}) and step seconds ({step_seconds}) must be above 0, "
            f"hosts ({hosts}) at least 1"
        )
    return tokens_per_step / step_seconds / hosts


def workers_needed(needed: float, per_worker: float, headroom: float = HEADROOM) -> int:
    """The Grain worker processes that deliver `needed` tokens per second with `headroom`, when
    one worker delivers `per_worker`."""
    if needed <= 0 or per_worker <= 0 or headroom < 1:
        raise ValueError(
            f"needed ({needed}) and per-worker ({per_worker}) tokens per second must be above 0, "
            f"headroom ({headroom}) at least 1"
        )
    return math.ceil(needed * headroom / per_worker)


def per_worker_rate(rates: Mapping[int, float]) -> float:
    """Tokens per second per worker process from measured rates by worker count: the lowest
    rate over worker count among the counts of one worker or more (worker count 0 runs the
    pipeline in the training process itself)."""
    per_worker = [rate / workers for workers, rate in rates.items() if workers >= 1]
    if not per_worker:
        raise ValueError(f"no measurement with one worker or more among worker counts {sorted(rates)}")
    return min(per_worker)


@dataclass(frozen=True)
class HostDemand:
    """What one host of a job must feed its chips: its share of each step's tokens, at the
    predicted step time."""

    name: str
    hosts: int
    chips: int
    tokens_per_step: float  # all chips
    step_seconds: float

    @classmethod
    def of(cls, name: str, job: JobSpec, *, step_seconds: float, tokens_per_chip: float) -> HostDemand:
        """For a TPU job (one worker, so one data-loading process, per VM) whose step a fit
        check predicts at `step_seconds` with `tokens_per_chip` tokens per chip."""
        if not job.use_tpu:
            raise ValueError(f"{name}: a CPU job has no TPU hosts to feed")
        hosts = job.max_workers
        chips = hosts * job.chips_per_host
        return cls(name, hosts, chips, tokens_per_chip * chips, step_seconds)

    @property
    def tokens_per_host_per_step(self) -> float:
        return self.tokens_per_step / self.hosts

    @property
    def tokens_per_second_per_host(self) -> float:
        return tokens_per_second_per_host(self.tokens_per_step, self.step_seconds, self.hosts)
