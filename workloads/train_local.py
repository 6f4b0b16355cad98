"""Trains the tiny CPU preset with the real trainer on a loopback-only local Ray cluster.

    python -m workloads.train_local [--elastic] [--set key=value ...]

Starts a Ray head (from the trainer environment) unless `--address` names a running one,
submits the trainer program with the Ray Jobs SDK, streams its log, and stops the head it
started. Checkpoints go to `--output` (default: .runs/ in the project).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from domain.job import JobError, resolve_job
from workloads.local_ray import PROJECT_ROOT, LocalRayHead


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise SystemExit(f"--set {pair!r}: use key=value, for example --set steps=10")
        overrides[key] = value
    return overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elastic", action="store_true", help="use the elastic trainer")
    parser.add_argument("--run-name", default=f"tiny-{int(time.time())}")
    parser.add_argument("--output", type=Path, default=PROJECT_ROOT / ".runs", help="checkpoint root")
    parser.add_argument("--address", help="a running Ray head's dashboard URL (default: start one)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a MaxText override (repeatable)")
    args = parser.parse_args(argv)
    try:
        job = resolve_job(
            "tiny-cpu", run_name=args.run_name, checkpoint_root=str(args.output.resolve()),
            elastic=args.elastic, overrides=parse_overrides(args.overrides),
        )
    except JobError as error:
        print(error, file=sys.stderr)
        return 2

    from ray.job_submission import JobSubmissionClient

    head = contextlib.nullcontext() if args.address else LocalRayHead()
    with head as started:
        address = args.address or started.address
        print(f"Ray head at {address}; submitting {job.trainer_module} ({job.run_name})", flush=True)
        client = JobSubmissionClient(address)
        job_id = client.submit_job(entrypoint=job.entrypoint())
        printed = 0
        while True:
            status = client.get_job_status(job_id)
            logs = client.get_job_logs(job_id)
            sys.stdout.write(logs[printed:])
            sys.stdout.flush()
            printed = len(logs)
            if status.is_terminal():
                break
            time.sleep(2)
    print(f"job {job_id}: {status}; checkpoints in {job.run_directory}", flush=True)
    return 0 if status == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
