"""Does running a job as a RayJob resource cost time over the manual way?

A: `RayJobProvider().create(...)`, what `pulumi up` runs (submit, then poll until the job ends).
B: `ray job submit --address URL --submission-id ID -- <entrypoint>`, the manual procedure (it
   submits, then streams the job's logs until the job ends).

Both run the same job on the same local cluster, with a fresh submission id each time, for
`--rounds` rounds; the order alternates every round so neither side always runs on the warmer
cluster. The default job prints one MaxText step line and exits, so the numbers are the
submission and wait overhead; `--tiny` trains the real tiny MaxText preset instead. Beside each
wall time is its overhead: the wall time less the job's own run time as Ray recorded it.

Run: `.venv/bin/python -m benchmarks.ray_job_vs_cli [--rounds N] [--tiny] [--address URL]`
(without --address it starts one loopback-only Ray head from .venv-trainer and stops it at the
end). Each side is timed from the caller's view: the CLI's time includes its own start-up, as it
does for an operator; the provider's excludes the plugin's start-up, paid once per `pulumi up`.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable

from ray.job_submission import JobStatus, JobSubmissionClient

from domain.training.job import resolve_job
from workloads.local_ray import TRAINER_VENV, LocalRayHead
from workloads.ray_job import RayJobProvider

RAY_CLI = TRAINER_VENV / "bin" / "ray"
STEP_ENTRYPOINT = (
    "python -c \"print('completed step: 0, seconds: 0.1, TFLOP/s/device: 1.0, "
    "Tokens/s/device: 100.0, total_weights: 64, loss: 2.5')\""
)
TIMEOUT_SECONDS = 900


def tiny_entrypoint(checkpoint_root: str, run_name: str) -> str:
    """The tiny preset as the local-run tests submit it; a new run name per job, or the second
    job would restore the first one's final checkpoint and train nothing."""
    job = resolve_job("tiny-cpu", run_name=run_name, checkpoint_root=checkpoint_root)
    return f"python -m trainer.maxtext_multi_slice_trainer --job {shlex.quote(job.to_json())}"


def finish(client: JobSubmissionClient, job_id: str, wall_seconds: float) -> tuple[float, float]:
    """The wall time and its overhead (less the job's own run time as Ray recorded it); then
    removes the job, so a long-lived cluster is left as it was."""
    info = client.get_job_info(job_id)
    client.delete_job(job_id)
    if info.start_time is None or info.end_time is None:
        raise RuntimeError(f"job {job_id} ({info.status}) has no start or end time: its run time is not known")
    return wall_seconds, wall_seconds - (info.end_time - info.start_time) / 1000


def run_provider(client: JobSubmissionClient, entrypoint: str, metadata: dict[str, str]) -> tuple[float, float]:
    """Its submission id derives from the inputs: a new `metadata` makes a new job."""
    props = {
        "stack": "bench",
        "entrypoint": entrypoint,
        "address": client.get_address(),
        "metadata": metadata,
        "timeout_seconds": TIMEOUT_SECONDS,
    }
    started = time.perf_counter()
    result = RayJobProvider().create(props)  # raises unless the job SUCCEEDED
    return finish(client, result.id, time.perf_counter() - started)


def run_cli(client: JobSubmissionClient, entrypoint: str, job_id: str) -> tuple[float, float]:
    command = [
        str(RAY_CLI),
        "job",
        "submit",
        "--address",
        client.get_address(),
        "--submission-id",
        job_id,
        "--",
        *shlex.split(entrypoint),
    ]
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    wall_seconds = time.perf_counter() - started
    # `ray job submit` exits 0 for a STOPPED job too: ask the cluster how it ended.
    status = client.get_job_status(job_id)
    if completed.returncode != 0 or status != JobStatus.SUCCEEDED:
        raise RuntimeError(
            f"`ray job submit` exited {completed.returncode}, job {job_id} {status}:\n"
            f"{completed.stdout[-3000:]}{completed.stderr[-3000:]}"
        )
    return finish(client, job_id, wall_seconds)


def cli_startup_seconds() -> float:
    """What the CLI pays before it talks to the cluster (interpreter, imports)."""
    started = time.perf_counter()
    subprocess.run([str(RAY_CLI), "job", "submit", "--help"], capture_output=True, check=True)
    return time.perf_counter() - started


def benchmark(address: str, rounds: int, make_entrypoint: Callable[[str], str]) -> None:
    client = JobSubmissionClient(address)
    nonce = uuid.uuid4().hex[:8]
    # A fresh head's first job waits for its job agent; the provider retries that, the CLI does not.
    warm_up, _ = run_provider(client, make_entrypoint(f"warm-{nonce}"), {"benchmark": nonce, "round": "0"})
    print(f"warm-up job (provider, not counted): {warm_up:.2f} s")
    print(f"CLI start-up alone (`ray job submit --help`): {cli_startup_seconds():.2f} s")
    print(f"{'round':>5} {'first':>8} {'provider s':>10} {'overhead':>8} {'cli s':>8} {'overhead':>8}")

    provider_times, cli_times = [], []
    for round_ in range(1, rounds + 1):

        def run_a(round_: int = round_) -> tuple[float, float]:
            return run_provider(
                client, make_entrypoint(f"p-{nonce}-{round_}"), {"benchmark": nonce, "round": str(round_)}
            )

        def run_b(round_: int = round_) -> tuple[float, float]:
            return run_cli(client, make_entrypoint(f"c-{nonce}-{round_}"), f"cli-bench-{nonce}-{round_}")

        if round_ % 2:
            (provider, provider_overhead), (cli, cli_overhead) = run_a(), run_b()
        else:
            (cli, cli_overhead), (provider, provider_overhead) = run_b(), run_a()
        provider_times.append(provider)
        cli_times.append(cli)
        first = "provider" if round_ % 2 else "cli"
        print(
            f"{round_:>5} {first:>8} {provider:>10.2f} {provider_overhead:>8.2f} {cli:>8.2f} {cli_overhead:>8.2f}",
            flush=True,
        )

    provider_median, cli_median = statistics.median(provider_times), statistics.median(cli_times)
    print(
        f"median: provider {provider_median:.2f} s, cli {cli_median:.2f} s, "
        f"provider/cli {provider_median / cli_median:.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="train the tiny MaxText preset in each job")
    parser.add_argument("--address", help="a running Ray dashboard URL (default: start a local head)")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        if args.tiny:
            checkpoint_root = stack.enter_context(tempfile.TemporaryDirectory(prefix="ray-job-bench-"))
            make_entrypoint = lambda run_name: tiny_entrypoint(checkpoint_root, run_name)  # noqa: E731
        else:
            make_entrypoint = lambda _run_name: STEP_ENTRYPOINT  # noqa: E731
        if args.address:
            address = args.address
        else:
            head = stack.enter_context(LocalRayHead())
            stack.enter_context(head.client_environment())  # the CLI and the SDK find its token
            address = head.address
        benchmark(address, args.rounds, make_entrypoint)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
