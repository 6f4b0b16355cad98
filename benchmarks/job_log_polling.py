"""What does waiting for a job cost the provider: bytes fetched from the Ray dashboard and memory?

The job prints `--lines` MaxText-style step lines (200,000 by default, ~110 bytes each, ~22 MB
of log) in bursts over `--job-seconds`, so the provider polls several times while the log grows.
`RayJobProvider().create(...)` runs in a subprocess (what `pulumi up` runs: submit, then poll
until the job ends) against a byte-counting HTTP proxy on loopback in front of a local Ray head.
The proxy records every request (method, path without the query, response body bytes); the
subprocess reports its peak RSS and the tracemalloc peak of the create call.

Figures: polls of log endpoints (requests whose path contains "/logs"), bytes per log request
(min/median/max), total bytes of log requests and of all requests, peak RSS, tracemalloc peak,
the job's status and steps_completed from the outputs, and the wall time of create. Bytes per
log request do not depend on the poll interval; their count and total do.

Run it against the checkout to measure (everything is imported from sys.path, so PYTHONPATH
picks the checkout; the local head, the provider and its subprocess all come from there):

    .venv/bin/python -m benchmarks.job_log_polling [--lines 200000] [--poll-seconds 5]
    PYTHONPATH=<another checkout> .venv/bin/python -m benchmarks.job_log_polling  # e.g. a git worktree of an older commit

`--poll-seconds` sets PROGRESS_EVERY_SECONDS and POLL_SECONDS where the wait reads them
(workloads/ray_job/wait.py; workloads/job_wait.py or workloads/ray_job.py in older checkouts) in the subprocess before
create; the provider's own default is 15 s. The Ray head runs from `--trainer-venv` (default:
<checkout>/.venv-trainer if it exists, else this checkout's .venv-trainer), loopback only, and is
stopped by its own pid at the end.
Peak RSS includes tracemalloc's own bookkeeping; `--no-tracemalloc` leaves it out.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import workloads
import workloads.local_ray as local_ray
from workloads.ray_job.record import JobResult

# The checkout the imported workloads/ is in (found from the package: local_ray is a package here
# and a module in older checkouts).
CHECKOUT = Path(workloads.__file__).resolve().parents[1]
# The environment of the checkout this file is in, for a measured checkout that has none.
FALLBACK_TRAINER_VENV = Path(__file__).resolve().parents[1] / ".venv-trainer"
RESULT_MARKER = "JOB_LOG_POLLING_RESULT "
TIMEOUT_SECONDS = 600

# Hop-by-hop headers (RFC 9110 7.6.1) are the proxy's own; Host is rewritten to the head.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
}

# The job: N step lines in bursts, flushed after each burst, then exit 0.
JOB_PROGRAM = """\
import sys, time
lines, bursts, pause = {lines}, {bursts}, {pause}
per_burst = -(-lines // bursts)
step = 0
while step < lines:
    end = min(step + per_burst, lines)
    sys.stdout.write("".join(
        f"completed step: {{i}}, seconds: 0.010, TFLOP/s/device: 1.000, "
        f"Tokens/s/device: 100.000, total_weights: 64, loss: 2.500\\n"
        for i in range(step, end)
    ))
    sys.stdout.flush()
    step = end
    if step < lines:
        time.sleep(pause)
"""

# Runs in the subprocess: the provider's create, as the engine would run it, measured.
CREATE_PROGRAM = """\
import importlib, json, resource, sys, time, tracemalloc, types
config = types.SimpleNamespace(**json.loads(sys.argv[1]))  # CreateConfig's fields
import ray.job_submission  # imported lazily by the provider anyway: keep it out of the delta
import workloads.ray_job as ray_job
# The wait reads them from workloads/ray_job/wait.py; older checkouts from workloads/job_wait.py,
# or from workloads/ray_job.py itself.
waits = ray_job
for where in ("workloads.ray_job.wait", "workloads.job_wait"):
    try:
        waits = importlib.import_module(where)
        break
    except ModuleNotFoundError:
        continue
constants = {}
for name in ("PROGRESS_EVERY_SECONDS", "POLL_SECONDS"):
    if hasattr(waits, name):
        constants[name] = [getattr(waits, name), config.poll_seconds]
        setattr(waits, name, config.poll_seconds)
rss_after_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if config.tracemalloc:
    tracemalloc.start()
started = time.perf_counter()
RESULT_MARKER = config.result_marker
outputs, error = None, None
try:
    result = ray_job.RayJobProvider().create(config.props)
    outputs = dict(result.outs, id=result.id)
except BaseException as exc:
    error = f"{type(exc).__name__}: {exc}"
wall = time.perf_counter() - started
traced_peak = tracemalloc.get_traced_memory()[1] if config.tracemalloc else None
# What CreateRun.from_json reads.
print(RESULT_MARKER + json.dumps({
    "module": ray_job.__file__,
    "constants": constants,
    "outputs": outputs,
    "error": error[-6000:] if error else None,
    "wall_seconds": wall,
    "rss_after_imports_kib": rss_after_imports,
    "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "tracemalloc_peak_bytes": traced_peak,
}, default=str), flush=True)
"""


@dataclass(frozen=True)
class CreateConfig:
    """What the create subprocess is given, as JSON: CREATE_PROGRAM reads these names."""

    props: dict[str, Any]  # the RayJob's inputs
    poll_seconds: float
    tracemalloc: bool
    result_marker: str


@dataclass(frozen=True)
class CreateRun:
    """What the create subprocess measured (CREATE_PROGRAM writes these names), with the job's
    outputs parsed once: None when create raised (then `error` says what)."""

    module: str
    constants: dict[str, list[float]]  # each constant set: [its value, the one set]
    result: JobResult | None
    error: str | None
    wall_seconds: float
    rss_after_imports_kib: int
    peak_rss_kib: int
    tracemalloc_peak_bytes: int | None

    @classmethod
    def from_json(cls, text: str) -> CreateRun:
        measured = json.loads(text)
        outputs = measured.pop("outputs")
        return cls(**measured, result=JobResult.from_props(outputs) if outputs else None)


# ---------------------------------------------------------------------------- the proxy


@dataclass(frozen=True)
class ProxyRecord:
    """One request through the proxy: when (seconds since the proxy started), its method and path
    (no query), the upstream's status (502: not reached), the response body's bytes sent back,
    what went wrong and how long it took (None when the upstream was not reached)."""

    t: float
    method: str
    path: str
    status: int
    body_bytes: int
    error: str | None
    seconds: float | None


class CountingProxy(ThreadingHTTPServer):
    """Forwards every request to one upstream (the head's dashboard) and records what it sent back."""

    daemon_threads = True

    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.records: list[ProxyRecord] = []
        self.lock = threading.Lock()
        self.started = time.monotonic()
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, entry: ProxyRecord) -> None:
        with self.lock:
            self.records.append(entry)


class _ProxyHandler(BaseHTTPRequestHandler):
    # HTTP/1.0 answers: one request per connection, the body delimited by its Content-Length or
    # by closing the connection, so a streamed answer passes through without re-chunking.
    protocol_version = "HTTP/1.0"
    server: CountingProxy

    def log_message(self, *_args) -> None:
        pass

    def do_GET(self) -> None:
        self._forward()

    do_POST = do_DELETE = do_PUT = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def _request_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(body)
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _forward(self) -> None:
        started = time.monotonic()
        at, path = round(started - self.server.started, 3), urlsplit(self.path).path
        upstream = http.client.HTTPConnection(
            self.server.upstream_host, self.server.upstream_port, timeout=TIMEOUT_SECONDS
        )
        try:
            body = self._request_body()
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            upstream.putheader("Host", f"{self.server.upstream_host}:{self.server.upstream_port}")
            chunked_request = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            for name, value in self.headers.items():
                lowered = name.lower()
                if lowered in HOP_BY_HOP or lowered == "host":
                    continue
                if chunked_request and lowered == "content-length":
                    continue
                upstream.putheader(name, value)  # Authorization, X-Ray-Authorization, cookies, ...
            if chunked_request:
                upstream.putheader("Content-Length", str(len(body or b"")))
            upstream.endheaders(body)
            response = upstream.getresponse()
        except OSError as error:
            failed = f"{type(error).__name__}: {error}"
            self.server.record(
                ProxyRecord(t=at, method=self.command, path=path, status=502, body_bytes=0, error=failed, seconds=None)
            )
            upstream.close()
            try:
                self.send_error(502, f"upstream: {error}")
            except OSError:
                pass
            return
        sent = 0
        failure: str | None = None
        try:
            self.send_response_only(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                # Forwarded as it arrives; read1 returns what is there (chunks decoded).
                while chunk := response.read1(65536):
                    self.wfile.write(chunk)
                    sent += len(chunk)
            self.wfile.flush()
        except OSError as error:
            failure = f"{type(error).__name__}: {error}"
        finally:
            seconds = round(time.monotonic() - started, 3)
            record = ProxyRecord(
                t=at,
                method=self.command,
                path=path,
                status=response.status,
                body_bytes=sent,
                error=failure,
                seconds=seconds,
            )
            self.server.record(record)
            upstream.close()
            self.close_connection = True


# ---------------------------------------------------------------------------- the benchmark


def default_trainer_venv() -> Path:
    own = CHECKOUT / ".venv-trainer"
    return own if own.exists() else FALLBACK_TRAINER_VENV


def job_entrypoint(lines: int, job_seconds: float, bursts: int) -> str:
    bursts = max(1, min(bursts, lines))
    pause = job_seconds / max(bursts - 1, 1)
    program = JOB_PROGRAM.format(lines=lines, bursts=bursts, pause=round(pause, 3))
    return f"python -c {shlex.quote(program)}"


def run_create(
    props: dict[str, Any], poll_seconds: float, use_tracemalloc: bool, extra_env: dict[str, str]
) -> tuple[CreateRun, str]:
    env = {**os.environ, **extra_env}
    # The same checkout as this process, whatever the current directory or editable install says.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), os.environ.get("PYTHONPATH")) if p)
    config = CreateConfig(
        props=props, poll_seconds=poll_seconds, tracemalloc=use_tracemalloc, result_marker=RESULT_MARKER
    )
    completed = subprocess.run(
        [sys.executable, "-c", CREATE_PROGRAM, json.dumps(asdict(config))],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_SECONDS + 300,
    )
    for line in completed.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return CreateRun.from_json(line[len(RESULT_MARKER) :]), completed.stderr
    raise RuntimeError(
        f"the create subprocess exited {completed.returncode} without a result:\n"
        f"{completed.stdout[-3000:]}\n{completed.stderr[-6000:]}"
    )


def normalize(path: str) -> str:
    return re.sub(r"pulumi-[A-Za-z0-9_-]+", "{id}", path)


def mib(value: float | None) -> float | None:
    return None if value is None else round(value / (1024 * 1024), 1)


@dataclass(frozen=True)
class Summary:
    """The figures: the report's table, and the JSON line at its end (each but `error`)."""

    checkout: str
    lines: int
    poll_seconds: float
    constants_set: dict[str, list[float]]
    log_requests: int
    log_bytes_min: int
    log_bytes_median: int
    log_bytes_max: int
    log_bytes_total: int
    requests_total: int
    bytes_total: int
    peak_rss_mib: float
    rss_after_imports_mib: float
    tracemalloc_peak_mib: float | None
    status: str  # the job's, or "create raised"
    steps_completed: int | None
    create_wall_seconds: float
    job_duration_seconds: float | None
    benchmark_wall_seconds: float
    log_request_bytes: list[int]
    error: str | None


def summarize(records: list[ProxyRecord], run: CreateRun, lines: int, poll_seconds: float, wall: float) -> Summary:
    logs = [r for r in records if "/logs" in r.path]
    log_bytes = [r.body_bytes for r in logs]
    job = run.result
    return Summary(
        checkout=str(CHECKOUT),
        lines=lines,
        poll_seconds=poll_seconds,
        constants_set=run.constants,
        log_requests=len(logs),
        log_bytes_min=min(log_bytes) if log_bytes else 0,
        log_bytes_median=int(statistics.median(log_bytes)) if log_bytes else 0,
        log_bytes_max=max(log_bytes) if log_bytes else 0,
        log_bytes_total=sum(log_bytes),
        requests_total=len(records),
        bytes_total=sum(r.body_bytes for r in records),
        peak_rss_mib=round(run.peak_rss_kib / 1024, 1),
        rss_after_imports_mib=round(run.rss_after_imports_kib / 1024, 1),
        tracemalloc_peak_mib=mib(run.tracemalloc_peak_bytes),
        status=job.status if job else "create raised",
        steps_completed=job.steps_completed if job else None,
        create_wall_seconds=round(run.wall_seconds, 1),
        job_duration_seconds=job.duration_seconds if job else None,
        benchmark_wall_seconds=round(wall, 1),
        log_request_bytes=log_bytes,
        error=run.error,
    )


def print_report(summary: Summary, records: list[ProxyRecord]) -> None:
    by_path: dict[tuple[str, str], list[int]] = {}
    for r in records:
        by_path.setdefault((r.method, normalize(r.path)), []).append(r.body_bytes)
    print("\nrequests through the proxy")
    print(f"  {'method':<7} {'path':<44} {'count':>6} {'bytes':>14}")
    for (method, path), sizes in sorted(by_path.items(), key=lambda item: -sum(item[1])):
        print(f"  {method:<7} {path:<44} {len(sizes):>6} {sum(sizes):>14,}")
    print("\nlog requests (seconds since the proxy started, response bytes)")
    for r in records:
        if "/logs" in r.path:
            print(f"  {r.t:>8.1f} s  {r.method} {normalize(r.path)}  {r.body_bytes:>12,}  ({r.seconds or 0:.2f} s)")
    rows = [
        ("checkout", summary.checkout),
        ("job lines", f"{summary.lines:,}"),
        ("poll seconds (set)", f"{summary.poll_seconds} {summary.constants_set}"),
        ("polls of log endpoints", summary.log_requests),
        ("bytes per log request min", f"{summary.log_bytes_min:,}"),
        ("bytes per log request median", f"{summary.log_bytes_median:,}"),
        ("bytes per log request max", f"{summary.log_bytes_max:,}"),
        ("total bytes, log requests", f"{summary.log_bytes_total:,}"),
        ("total bytes, all requests", f"{summary.bytes_total:,} ({summary.requests_total} requests)"),
        ("peak RSS MiB", f"{summary.peak_rss_mib} (after imports {summary.rss_after_imports_mib})"),
        ("tracemalloc peak MiB", summary.tracemalloc_peak_mib),
        ("job status", summary.status),
        ("steps_completed", summary.steps_completed),
        ("create wall seconds", f"{summary.create_wall_seconds} (job ran {summary.job_duration_seconds} s)"),
        ("benchmark wall seconds", summary.benchmark_wall_seconds),
    ]
    print()
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    if summary.error:
        print(f"\ncreate raised:\n{summary.error}")
    figures = {name: value for name, value in asdict(summary).items() if name != "error"}
    print("\n" + json.dumps(figures, sort_keys=True), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000, help="step lines the job prints")
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=5.0,
        help="PROGRESS_EVERY_SECONDS (and POLL_SECONDS) in the provider (default 5)",
    )
    parser.add_argument("--job-seconds", type=float, default=75.0, help="how long the job spreads its lines over")
    parser.add_argument("--bursts", type=int, default=50, help="bursts of lines the job prints")
    parser.add_argument(
        "--trainer-venv",
        type=Path,
        default=None,
        help="the virtualenv the Ray head runs from (default: <checkout>/.venv-trainer "
        f"if it exists, else {FALLBACK_TRAINER_VENV})",
    )
    parser.add_argument("--no-tracemalloc", action="store_true", help="do not trace allocations in create")
    parser.add_argument("--keep-temp", action="store_true", help="keep the head's temp dir (its logs)")
    parser.add_argument("--show-stderr", action="store_true", help="print the provider's stderr (progress lines)")
    args = parser.parse_args()
    trainer_venv = args.trainer_venv or default_trainer_venv()

    started = time.monotonic()
    print(f"checkout {CHECKOUT}; provider python {sys.executable}; head from {trainer_venv}", flush=True)
    head = local_ray.LocalRayHead(venv=trainer_venv)
    proxy: CountingProxy | None = None
    proxy_thread: threading.Thread | None = None
    try:
        head.start()
        print(
            f"Ray head {head.address} (pid {head.process.pid if head.process else '?'}), "
            f"started in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        proxy = CountingProxy(head.address)
        proxy_thread = threading.Thread(target=proxy.serve_forever, name="counting-proxy", daemon=True)
        proxy_thread.start()
        print(f"counting proxy {proxy.address} -> {head.address}", flush=True)

        props = {
            "stack": "bench",
            "entrypoint": job_entrypoint(args.lines, args.job_seconds, args.bursts),
            "address": proxy.address,
            "gke": None,
            "runtime_env": None,
            "metadata": {"bench": uuid.uuid4().hex},
            "timeout_seconds": TIMEOUT_SECONDS,
            "total_steps": args.lines,
        }
        extra_env = getattr(head, "client_env", None) or {}
        print(
            f"create: {args.lines:,} lines over ~{args.job_seconds:.0f} s, polling every "
            f"{args.poll_seconds} s{' (client_env passed)' if extra_env else ''} ...",
            flush=True,
        )
        run, stderr = run_create(props, args.poll_seconds, not args.no_tracemalloc, dict(extra_env))
        if args.show_stderr or run.error:
            print("--- provider stderr ---\n" + stderr[-6000:], flush=True)
        with proxy.lock:
            records = list(proxy.records)
        summary = summarize(records, run, args.lines, args.poll_seconds, time.monotonic() - started)
        print_report(summary, records)
        return 0 if summary.status == "SUCCEEDED" else 1
    finally:
        if proxy is not None:
            proxy.shutdown()
            proxy.server_close()
        if proxy_thread is not None:
            proxy_thread.join(timeout=10)
        head.stop()
        temp_dir = getattr(head, "temp_dir", None)
        if temp_dir and not args.keep_temp:
            shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
