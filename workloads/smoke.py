"""The main job on its embedded default: the workloads `local` stack's training job (the tiny CPU
preset) on a loopback-only local Ray cluster, through the same RayJob provider `pulumi up` uses.

    python -m workloads.smoke [--elastic] [--set KEY=VALUE ...]

Uses the Ray head at the local stack's address if one answers there; otherwise starts one (from
the trainer environment) and stops it, by its pid, at the end. Each run gets a new run name, so
it trains from scratch (checkpoints under .runs/). Progress goes to stderr; the last
line on stdout is one JSON object with the job's outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import yaml

from domain.job import JobError
from domain.workload_settings import WorkloadSettingsError, parse_workload_settings
from workloads import job_inputs
from workloads.jobs_api import ErrorKind, JobsApi, JobsApiError
from workloads.local_ray import LocalRayError, LocalRayHead
from workloads.ray_job import EXPORTED, RayJobError, RayJobProvider

PROJECT = "maxtext-tpu-workloads"
LOCAL_STACK_FILE = Path(__file__).with_name("Pulumi.local.yaml")


def local_stack_config() -> dict:
    config = yaml.safe_load(LOCAL_STACK_FILE.read_text())["config"]
    return {key.split(":", 1)[1]: value for key, value in config.items() if key.startswith(f"{PROJECT}:")}


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elastic", action="store_true", help="run the elastic trainer")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a MaxText setting to add or override, e.g. --set steps=20 (repeatable)",
    )
    args = parser.parse_args(argv)
    for pair in args.overrides:
        if "=" not in pair or pair.startswith("="):
            parser.error(f"--set {pair!r}: use KEY=VALUE, for example --set steps=20")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = local_stack_config()
    config["elastic"] = args.elastic
    config["maxtextOverrides"] = dict(pair.split("=", 1) for pair in args.overrides)
    try:
        settings = parse_workload_settings(config, stack="local", project_name=PROJECT)
        # A fresh run each time: a fixed name would restore the previous run's final checkpoint.
        settings = dataclasses.replace(settings, run_name=f"{settings.preset}-{time.strftime('%Y%m%d-%H%M%S')}")
        job = job_inputs.resolve_local(settings)
    except (WorkloadSettingsError, JobError) as error:
        print(error, file=sys.stderr)
        return 2
    assert settings.address is not None
    head: contextlib.AbstractContextManager = contextlib.nullcontext()
    try:
        with JobsApi(settings.address) as api:
            api.check_reachable()  # with the token Ray's own lookup finds, if any
        print(f"using the Ray head already running at {settings.address}", file=sys.stderr)
    except JobsApiError as error:
        if error.kind is not ErrorKind.UNREACHABLE:
            print(error, file=sys.stderr)  # a head answers there, but not to us: say how to fix it
            return 2
        port = urlparse(settings.address).port or 8265
        print(f"starting a loopback-only Ray head on port {port}", file=sys.stderr, flush=True)
        head = LocalRayHead(dashboard_port=port)

    provider = RayJobProvider()
    props = {
        "stack": settings.stack,
        "address": settings.address,
        "gke": None,
        **job_inputs.ray_job_inputs(job, settings),
    }
    checked = provider.check({}, props)
    if checked.failures:
        for failure in checked.failures:
            print(f"{failure.property}: {failure.reason}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        with head as local_head:
            # The provider finds a head's Ray token the way it would from a user's shell.
            with local_head.client_environment() if local_head else contextlib.nullcontext():
                result = provider.create(checked.inputs)
    except (RayJobError, JobsApiError, LocalRayError) as error:
        print(error, file=sys.stderr)
        return 1
    print(f"finished in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(json.dumps({key: result.outs.get(key) for key in EXPORTED}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
