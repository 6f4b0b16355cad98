"""Input pipeline speed: the real tokens per second MaxText's own Grain pipeline delivers on this
machine, by Grain worker count, beside what each TPU preset's hosts need (docs/training.md,
"Input pipeline speed"):

    .venv-trainer/bin/python -m benchmarks.input_pipeline [--workers 0 1 2] [--seconds 20] [--corpus FILE.jsonl]

Runs in the trainer environment (MaxText, Grain, JAX on CPU). For each TPU preset it builds the
iterator a job's train loop reads (MaxText's `create_data_iterator` with `dataset_type=grain`:
parse, tokenize, trim, pack and batch with MaxText's defaults, then onto the devices), with the
preset's batch on one host (its `per_device_batch_size` on as many CPU devices as a TPU VM has
chips) and `max_target_length`, and the Llama 3 tokenizer MaxText ships. It counts the tokens
that are not padding in the batches delivered in `--seconds` after the first one (the time to
the first batch is shown apart), at each worker count. Each preset's hosts then need its
predicted step's tokens (the speed model, domain/perf/step_time.py, from the preset's fit check:
cached under .cache/fit-check, else compiled first, a few minutes each) over its step time and
hosts; workers = ceil(need x headroom / the lowest measured rate per worker process)
(domain/perf/input_pipeline.py).

The corpus, unless `--corpus` names a JSONL file with a `text` field, is the descriptions of the
trainer environment's installed packages (their READMEs: prose, code, tables), prepared with
`trainer.prepare_data` and read as many epochs as the measurement takes. `--measure-only` leaves
out the need (no fit check).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.perf.input_pipeline import HEADROOM, HostDemand, per_worker_rate, workers_needed
from domain.training.dataset import DEFAULT_TOKENIZER, SHIPPED_TOKENIZERS
from domain.training.maxtext_config import base_config_path
from domain.training.presets import PRESETS, Preset

BEGIN, END = "<!-- input-pipeline -->", "<!-- /input-pipeline -->"
WORKER_COUNTS = (0, 1, 2)
SECONDS = 20.0
# Epochs over the corpus: more than any measurement reads (MaxText's default, 1, would end a
# small corpus within seconds).
EPOCHS = 10_000


@dataclass(frozen=True)
class Measurement:
    preset: str
    workers: int
    sequences: int  # per host per batch
    length: int  # max_target_length
    seconds_to_first_batch: float
    batches: int  # after the first
    seconds: float
    real_tokens: int  # not padding

    @property
    def tokens_per_second(self) -> float:
        return self.real_tokens / self.seconds

    @property
    def batches_per_second(self) -> float:
        return self.batches / self.seconds

    @property
    def fill(self) -> float:
        """Real tokens over the batches' token slots (packing leaves the rest as padding)."""
        return self.real_tokens / (self.batches * self.sequences * self.length)


def package_descriptions(path: Path) -> int:
    """Writes the installed distributions' long descriptions (sorted by name) to `path` as
    JSONL documents; returns how many."""
    written = 0
    with path.open("w", encoding="utf-8") as out:
        for dist in sorted(importlib.metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower()):
            body = dist.metadata.get_payload() or dist.metadata.get("Description") or ""  # type: ignore[attr-defined]
            if isinstance(body, str) and body.strip():
                out.write(json.dumps({"text": body}) + "\n")
                written += 1
    return written


def tokenizer_path() -> tuple[str, str]:
    """The Llama 3 tokenizer MaxText ships (an absolute path: its default, relative one does not
    resolve in an installed package) and its type."""
    import maxtext

    shipped = SHIPPED_TOKENIZERS[DEFAULT_TOKENIZER]
    return str(Path(maxtext.__file__).parent / "assets" / "tokenizers" / shipped.file), shipped.type


def _config(pattern: str, preset: Preset, workers: int, output: str) -> Any:
    from maxtext.configs import pyconfig

    path, kind = tokenizer_path()
    overrides = preset.maxtext_overrides
    args = {
        "run_name": "input-pipeline",
        "base_output_directory": output,
        "hardware": "cpu",
        "model_name": overrides["model_name"],
        "per_device_batch_size": overrides["per_device_batch_size"],
        "max_target_length": overrides["max_target_length"],
        "dataset_type": "grain",
        "grain_train_files": pattern,
        "grain_file_type": "arrayrecord",
        "grain_worker_count": str(workers),
        "tokenizer_path": path,
        "tokenizer_type": kind,
        "num_epoch": str(EPOCHS),
        "enable_checkpointing": "false",
        "skip_jax_distributed_system": "true",
    }
    return pyconfig.initialize(["maxtext", str(base_config_path()), *(f"{k}={v}" for k, v in args.items())])


def _close(batches: Any) -> None:
    """Stops the Grain iterator under MaxText's (its worker processes with it). MaxText's own
    `close` raises with this Grain (it probes an iterator's `_parent`, which asserts), so it is
    kept from running again when the iterator is collected."""
    batches.local_iterator.close()
    del batches.local_iterator, batches.dataloader


def measure(pattern: str, preset: Preset, workers: int, seconds: float) -> Measurement:
    """MaxText's train iterator over `pattern` for `preset`'s batch on one host, read for
    `seconds` after its first batch."""
    import jax
    import numpy as np
    from maxtext.input_pipeline import multihost_dataloading
    from maxtext.input_pipeline.input_pipeline_interface import create_data_iterator
    from maxtext.utils import maxtext_utils

    # MaxText's iterator, when closed or collected, also SIGTERMs and SIGKILLs every process on
    # the machine whose command line says multiprocessing.spawn and whose parent is PID 1: here,
    # only this benchmark's own iterator's workers are stopped.
    multihost_dataloading._cleanup_orphaned_multiprocessing_processes = lambda: None
    chips = preset.slice_shape.chips_per_vm
    if jax.local_device_count() != chips:
        raise RuntimeError(
            f"JAX sees {jax.local_device_count()} devices, {preset.name} has {chips} chips per host: "
            "run this module as a program (it sets XLA_FLAGS before JAX starts)"
        )
    with tempfile.TemporaryDirectory(prefix="input-pipeline-") as output:
        started = time.monotonic()
        config = _config(pattern, preset, workers, output)
        mesh = jax.sharding.Mesh(maxtext_utils.create_device_mesh(config), config.mesh_axes)
        batches, _ = create_data_iterator(config, mesh)
        try:
            next(batches)
            first = time.monotonic()
            count = real = 0
            while time.monotonic() - first < seconds:
                batch = next(batches)
                real += int(np.count_nonzero(np.asarray(batch["inputs_segmentation"])))
                count += 1
            elapsed = time.monotonic() - first
        finally:
            _close(batches)
    return Measurement(
        preset=preset.name,
        workers=workers,
        sequences=int(config.global_batch_size_to_load),
        length=int(config.max_target_length),
        seconds_to_first_batch=first - started,
        batches=count,
        seconds=elapsed,
        real_tokens=real,
    )


def measurement_table(measurements: Sequence[Measurement]) -> list[str]:
    lines = [
        "| preset (batch per host) | Grain workers | first batch after | batches/s | real tokens/s per host | filled |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for m in measurements:
        lines.append(
            f"| `{m.preset}` ({m.sequences} x {m.length}) | {m.workers} | {m.seconds_to_first_batch:.1f} s "
            f"| {m.batches_per_second:.2f} | {m.tokens_per_second:,.0f} | {100 * m.fill:.1f}% |"
        )
    return lines


def demand(preset: Preset) -> HostDemand:
    """The preset's hosts' need, from its fit check's predicted step (cached, else compiled)."""
    from domain.perf.fit_results import fit_check_job
    from trainer.fit_check import run_fit_check

    job = fit_check_job(preset.name)
    result = run_fit_check(job)
    prediction = result.prediction
    if prediction is None or not result.tokens_per_chip:
        raise RuntimeError(f"{preset.name}: its fit check predicts no step time:\n{result.report()}")
    return HostDemand.of(preset.name, job, step_seconds=prediction.step_seconds, tokens_per_chip=result.tokens_per_chip)


def need_table(demands: Sequence[HostDemand], measurements: Sequence[Measurement], headroom: float) -> list[str]:
    lines = [
        "| preset | hosts | tokens per step | predicted step | needed tokens/s per host "
        "| per worker, measured here | workers needed (x" + f"{headroom:g} headroom) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for need in demands:
        rates = {m.workers: m.tokens_per_second for m in measurements if m.preset == need.name}
        per_worker = per_worker_rate(rates)
        lines.append(
            f"| `{need.name}` | {need.hosts} | {need.tokens_per_step:,.0f} | {need.step_seconds:.3f} s "
            f"| {need.tokens_per_second_per_host:,.0f} | {per_worker:,.0f} "
            f"| {workers_needed(need.tokens_per_second_per_host, per_worker, headroom)} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=list(WORKER_COUNTS), help="Grain worker counts")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="how long to read after the first batch")
    parser.add_argument("--corpus", type=Path, help="a JSONL file with a text field (default: package descriptions)")
    tpu = [name for name, p in PRESETS.items() if p.runs_on_tpu]
    parser.add_argument("--preset", action="append", choices=tpu, help="a TPU preset (default: each)")
    parser.add_argument("--measure-only", action="store_true", help="leave out the need (no fit check)")
    args = parser.parse_args(argv)
    if any(count < 0 for count in args.workers) or args.seconds <= 0:
        parser.error("worker counts are 0 or more, --seconds above 0")
    if not args.measure_only and max(args.workers) < 1:
        parser.error("the need is counted in workers: measure at least one worker count of 1 or more")
    presets = [PRESETS[name] for name in (args.preset or tpu)]
    chips = {p.slice_shape.chips_per_vm for p in presets}
    if len(chips) != 1:
        parser.error(f"the presets' hosts have different chip counts ({sorted(chips)}): measure them one at a time")
    if "jax" not in sys.modules:
        os.environ["JAX_PLATFORMS"] = "cpu"
        os.environ["XLA_FLAGS"] = (
            f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={chips.pop()}"
        )
    # Grain's worker processes read absl's flags; MaxText is not started through absl's app.run.
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    from trainer.prepare_data import prepare

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="input-pipeline-corpus-") as scratch:
        corpus = args.corpus
        if corpus is None:
            corpus = Path(scratch) / "packages.jsonl"
            package_descriptions(corpus)
        manifest = prepare([str(corpus)], Path(scratch) / "prepared", tokenizer=DEFAULT_TOKENIZER)
        pattern = str(Path(scratch) / "prepared" / "data-*.array_record")
        measurements = []
        for preset in presets:
            for workers in args.workers:
                measured = measure(pattern, preset, workers, args.seconds)
                print(
                    f"measured {preset.name} at {workers} workers: {measured.tokens_per_second:,.0f} tokens/s",
                    file=sys.stderr,
                )
                measurements.append(measured)
    load_after = os.getloadavg()[0]
    sections = [
        [
            f"Corpus: {manifest.documents} documents, {manifest.bytes:,} bytes, {manifest.tokens or 0:,} Llama 3 tokens "
            f"({corpus.name if args.corpus else 'package descriptions'}); {os.cpu_count()} CPUs, "
            f"load average {load:.2f} when it started, {load_after:.2f} when it ended; {args.seconds:g} s per row after the first batch."
        ],
        measurement_table(measurements),
    ]
    if not args.measure_only:
        sections.append(need_table([demand(p) for p in presets], measurements, HEADROOM))
    print(BEGIN)
    print("\n\n".join("\n".join(section) for section in sections))
    print(END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
