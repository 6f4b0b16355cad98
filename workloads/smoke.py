"""The main job on its embedded default: the workloads `local` stack's training job (the tiny CPU
preset) on a loopback-only local Ray cluster, through the same RayJob provider `pulumi up` uses.

    python -m workloads.smoke [--elastic] [--address URL] [--set KEY=VALUE ...]

Uses the Ray head at the local stack's address (or --address) if one answers there; if nothing
listens there, starts one (from the trainer environment) and stops it, by its pid, at the end;
anything else holding that port is named (pid and command) and the run stops at once. Each run
gets a new run name, so it trains from scratch (checkpoints under .runs/). Progress goes to
stderr; the last line on stdout is one strict JSON object with the job's outputs (a diverged
run's final_loss is null and diverged true, and the run exits 1).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import requests
import yaml

from domain.config import cli_config
from domain.config.workload_settings import WorkloadSettingsError, parse_workload_settings
from domain.paths import WORKLOADS_PROJECT
from domain.training.dataset import DEFAULT_TOKENIZER, SHIPPED_TOKENIZERS
from domain.training.job import JobError, JobSpec
from domain.workload_settings import WorkloadSettings
from workloads import job_inputs, job_resolution
from workloads.jobs_api import JobsApi
from workloads.jobs_api.errors import ErrorKind, JobsApiError
from workloads.jobs_api.local import AUTHENTICATION_MODE_PATH, authentication_mode_of, local_ray_token
from workloads.local_ray import LocalRayError, LocalRayHead, port_holder
from workloads.ray_job import RayJobProvider
from workloads.ray_job.record import EXPORTED, JobResult, RayJobError

PROJECT = WORKLOADS_PROJECT
LOCAL_STACK_FILE = Path(__file__).with_name("Pulumi.local.yaml")
# A Ray dashboard answers /api/version in milliseconds; a port holder that has not answered in
# this long is not one.
PROBE_SECONDS = 3.0
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


class SmokeError(RuntimeError):
    pass


def local_stack_config() -> dict:
    """The local stack's settings as `pulumi up` would hand them over: the project's defaults merged in."""
    stack = yaml.safe_load(LOCAL_STACK_FILE.read_text())["config"]
    return cli_config.settings_raw(LOCAL_STACK_FILE.parent, "local", stack, WorkloadSettings)


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elastic", action="store_true", help="run the elastic trainer")
    parser.add_argument(
        "--address",
        help="the loopback Ray dashboard URL to use, or to start a head on if nothing listens there "
        "(default: the local stack's address)",
    )
    parser.add_argument(
        "--dataset",
        metavar="PATTERN",
        help="train on the ArrayRecord or Parquet files PATTERN matches (quoted; records with a `text` feature or "
        "column: python -m trainer.prepare_data makes them), with the Llama 3 tokenizer MaxText ships",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        metavar="N",
        help="with --dataset: passes over the files the run may make (the stack's epochs; default one)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a MaxText setting to add or override, e.g. --set steps=20 (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.epochs is not None and args.dataset is None:
        parser.error("--epochs applies to --dataset: the synthetic data never runs out")
    for pair in args.overrides:
        if "=" not in pair or pair.startswith("="):
            parser.error(f"--set {pair!r}: use KEY=VALUE, for example --set steps=20")
    if args.address is not None:
        url = urlparse(args.address)
        try:
            port = url.port
        except ValueError:
            port = None
        if url.scheme != "http" or url.hostname not in LOOPBACK_HOSTS or port is None or url.path not in ("", "/"):
            parser.error(f"--address {args.address!r}: give a loopback dashboard URL, e.g. http://127.0.0.1:8266")
    return args


def _elsewhere(port: int) -> str:
    return f"stop it, or run the smoke on a free port: python -m workloads.smoke --address http://127.0.0.1:{port + 1}"


def existing_head(address: str) -> bool:
    """True when a Ray dashboard answers at `address` (a loopback URL), False when nothing
    listens there (so a head can be started on its port); raises SmokeError, within
    PROBE_SECONDS, naming the port and the process that holds it, for anything else."""
    url = urlparse(address)
    host, port = url.hostname or "127.0.0.1", url.port or 8265
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except ConnectionRefusedError:
        return False
    except OSError as error:
        raise SmokeError(f"could not connect to {host}:{port} ({error}); {_elsewhere(port)}") from None
    # Ray's one unauthenticated JSON answer: until the holder has given it, it is not known to be
    # Ray, and the shell's token (another cluster's, perhaps) is not sent to it.
    mode = _authentication_mode(address, host, port)
    token = local_ray_token() if mode == "token" else None
    response = _probe(f"{address.rstrip('/')}/api/version", host, port, token)
    if response.status_code in (401, 403) and mode == "token":
        # A Ray head that wants a token: say how to give it (the Jobs API's own advice).
        raise SmokeError(
            f"the Ray head at {address} refused this client (HTTP {response.status_code}); "
            f"{JobsApi(address).fix_for(ErrorKind.UNAUTHORIZED)}"
        )
    try:
        body = response.json()
    except ValueError:
        body = None
    is_ray = response.status_code == 200 and isinstance(body, dict) and "ray_version" in body
    if not is_ray:
        kind = response.headers.get("Content-Type", "no content type").split(";")[0]
        raise SmokeError(
            f"port {port} on {host} is held by {port_holder(port)}, which answers HTTP but is not a Ray "
            f"dashboard (/api/version gave HTTP {response.status_code}, {kind}); {_elsewhere(port)}"
        )
    return True


def _probe(url: str, host: str, port: int, token: str | None = None) -> requests.Response:
    try:
        return requests.get(url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=PROBE_SECONDS)
    except requests.RequestException as error:
        raise SmokeError(
            f"port {port} on {host} is held by {port_holder(port)}, which accepts connections but did not "
            f"answer HTTP within {PROBE_SECONDS:.0f} s ({type(error).__name__}): it is not a Ray dashboard, "
            f"and no Ray head can start there; {_elsewhere(port)}"
        ) from None


def _authentication_mode(address: str, host: str, port: int) -> str | None:
    """What a Ray dashboard says of its authentication (Ray 2.52 and later): "token" or
    "disabled"; None for any other answer."""
    return authentication_mode_of(_probe(f"{address.rstrip('/')}{AUTHENTICATION_MODE_PATH}", host, port))


def fresh_run_name(preset: str) -> str:
    """A new run each time: a fixed name would restore the previous run's final checkpoint, and
    two smoke runs started in the same second (by two users, or two test sessions) would share
    one job and one checkpoint directory without the process id."""
    return f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def result_line(outs: Mapping[str, Any]) -> str:
    """The exported outputs as one line of strict JSON: a value JSON cannot hold (NaN, infinity)
    raises ValueError here rather than printing a line that JSON.parse refuses."""
    return json.dumps({key: outs.get(key) for key in EXPORTED}, allow_nan=False)


def local_job_props(job: JobSpec, settings: WorkloadSettings, address: str | None) -> dict[str, Any]:
    """The RayJob's props for `job` on the local Ray head at `address`, as `pulumi up` would give
    them: not a Pulumi run, so no organization, the local stack's project and stack name."""
    return {
        "organization": None,
        "project": PROJECT,
        "stack": settings.stack,
        "address": address,
        "gke": None,
        **job_inputs.ray_job_inputs(job, settings),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = local_stack_config()
    if args.address is not None:
        config["address"] = args.address
    config["elastic"] = args.elastic
    config["maxtextOverrides"] = dict(pair.split("=", 1) for pair in args.overrides)
    if args.dataset is not None:
        config["datasetFiles"] = str(Path(args.dataset).absolute())
        # The tiny model's 256-token vocabulary cannot hold the Llama 3 tokenizer's ids.
        config["maxtextOverrides"].setdefault("vocab_size", str(SHIPPED_TOKENIZERS[DEFAULT_TOKENIZER].vocab_size))
        if args.epochs is not None:
            config["epochs"] = args.epochs
    try:
        settings = parse_workload_settings(config, stack="local", project_name=PROJECT)
        settings = dataclasses.replace(settings, run_name=fresh_run_name(settings.preset or "run"))
    except WorkloadSettingsError as error:
        print(error, file=sys.stderr)
        return 2
    assert settings.address is not None
    head: contextlib.AbstractContextManager = contextlib.nullcontext()
    try:
        # First: it takes seconds, and a port held by something else needs no job resolved.
        reuse = existing_head(settings.address)
        job = job_resolution.resolve_local(settings, warn=lambda warning: print(f"warning: {warning}", file=sys.stderr))
    except (SmokeError, JobError) as error:
        print(error, file=sys.stderr)
        return 2
    if reuse:
        print(f"using the Ray head already running at {settings.address}", file=sys.stderr)
    else:
        port = urlparse(settings.address).port or 8265
        print(f"starting a loopback-only Ray head on port {port}", file=sys.stderr, flush=True)
        head = LocalRayHead(dashboard_port=port)

    provider = RayJobProvider()
    checked = provider.check({}, local_job_props(job, settings, settings.address))
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
    outs = result.outs
    assert outs is not None, "RayJobProvider.create returns the job's outputs"
    line, outputs = result_line(outs), JobResult.from_props(outs)
    if outputs.diverged:
        print(
            f"finished in {time.monotonic() - started:.0f} s, but the run DIVERGED: its last loss is not a "
            f"finite number (final_loss is null)",
            file=sys.stderr,
        )
    else:
        print(f"finished in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(line)
    # Last, where a person looks: the run's page (the JSON line's report_path too).
    if outputs.report_path is not None:
        print(f"the run's page: {outputs.report_path}", file=sys.stderr)
    return 1 if outputs.diverged else 0


if __name__ == "__main__":
    sys.exit(main())
