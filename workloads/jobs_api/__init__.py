"""Reaching a Ray cluster's Jobs API, for the length of one provider operation: `JobsApi`, the
client, the same for every target; what differs between a head reached directly (`local`) and a
head service on GKE reached through the Kubernetes API server (`gke`, with the operator's Google
login: `gke_access`) is behind `target.JobsTarget`. Every failure becomes a `JobsApiError` whose
kind is classified once (`errors`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import requests

from workloads.jobs_api.errors import (
    REQUEST_TIMEOUT_SECONDS,
    ErrorKind,
    JobsApiError,
    NoAnswer,
    classify,
    first_line,
    kind_of_status,
    within,
)
from workloads.jobs_api.gke import GkeHead
from workloads.jobs_api.gke_access import GkeTarget
from workloads.jobs_api.local import LocalHead
from workloads.jobs_api.target import ClusterCheck, JobsTarget

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

# Tokens from the auth plugin live an hour: mint a new client well before that.
TOKEN_REFRESH_SECONDS = 30 * 60
REACH_TIMEOUT_SECONDS = 10
# A tail read asks for the log's last LOG_TAIL_LINES lines and keeps at most their newest
# LOG_TAIL_MAX_BYTES, whatever the log's size (see `log_tail`).
LOG_TAIL_LINES = 500
LOG_TAIL_MAX_BYTES = 512 * 1024
# Ray's state API answers at most this many: far more than the hosts of any stack's slices.
NODE_LIST_LIMIT = 10_000
# The longest line a whole-log read keeps (the rest of a longer line is dropped).
LOG_LINE_MAX_BYTES = 64 * 1024

T = TypeVar("T")


def target_of(address: str | None, gke: GkeTarget | None) -> JobsTarget:
    """The target a RayJob's `address` or `gke` input names: the one place the two are told apart."""
    if address is not None and gke is None:
        return LocalHead(address)
    if gke is not None and address is None:
        return GkeHead(gke)
    raise ValueError("give exactly one of address (a Ray dashboard URL) or gke (an infra stack's cluster)")


class JobsApi:
    """One target's Jobs API for the length of one provider operation (use it in `with`): hands
    out a JobSubmissionClient, re-authenticating when due."""

    def __init__(self, address: str | None = None, gke: GkeTarget | None = None):
        self.target = target_of(address, gke)
        self._client: JobSubmissionClient | None = None
        self._headers: dict[str, str] = {}
        self._minted_at = 0.0

    def __enter__(self) -> JobsApi:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.target.close()
        self._client = None

    # ------------------------------------------------------------------ describing the target

    @property
    def address(self) -> str:
        return self.target.address

    def describe(self) -> str:
        return self.target.describe()

    def cluster_name(self) -> str:
        return self.target.cluster_name()

    def how_to_reach(self) -> str:
        return self.target.how_to_reach()

    def fix_for(self, kind: ErrorKind) -> str:
        if kind is ErrorKind.CREDENTIALS:
            return "log in again with `gcloud auth login` (and install gke-gcloud-auth-plugin if it is missing)"
        if kind is ErrorKind.UNAUTHORIZED:
            return self.target.how_to_authorize()
        return self.target.how_to_reach()

    # ------------------------------------------------------------------ authentication

    def headers(self) -> dict[str, str]:
        """Fresh headers: the target's credentials. Never logged."""
        return self.target.headers()

    def client(self) -> JobSubmissionClient:
        """A JobSubmissionClient, re-created when the GKE token is due for renewal."""
        from ray.job_submission import JobSubmissionClient

        if self._client is None or time.monotonic() - self._minted_at > TOKEN_REFRESH_SECONDS:
            self._headers = self.headers()
            self._client = JobSubmissionClient(self.address, headers=self._headers or None, verify=self.target.verify())
            self._minted_at = time.monotonic()
        return self._client

    # ------------------------------------------------------------------ operations

    def check_reachable(self) -> str | None:
        """Fails within REACH_TIMEOUT_SECONDS, naming the address, instead of hanging (the SDK's
        own version check has no timeout). Returns the answer's HTTP Date header: the cluster's
        clock (RayJobProvider measures a job's run time on it)."""
        what = "cannot reach the Ray Jobs API"
        try:
            headers = self.headers()
            response = requests.get(
                f"{self.address}/api/version",
                headers=headers,
                verify=self.target.verify(),
                timeout=REACH_TIMEOUT_SECONDS,
            )
        except JobsApiError as error:
            raise JobsApiError(
                error.kind, f"{what} at {self.describe()} ({error}); {self.fix_for(error.kind)}"
            ) from None
        except OSError as error:
            raise JobsApiError(
                ErrorKind.UNREACHABLE,
                f"{what} at {self.describe()} ({first_line(error)}); {self.how_to_reach()}",
            ) from None
        if response.status_code != 200:
            kind = kind_of_status(response.status_code, response.text)
            raise JobsApiError(
                kind,
                f"{what} at {self.describe()} (HTTP {response.status_code}); {self.fix_for(kind)}",
                response.status_code,
            )
        return response.headers.get("Date")

    def call(self, what: str, operation: Callable[[Any], T]) -> T:
        """Runs `operation(client)`; any failure becomes a JobsApiError naming what was tried,
        where, and what the answer was. No answer within REQUEST_TIMEOUT_SECONDS counts as
        unreachable: the Ray SDK sends its requests with no timeout, so a server that accepts a
        connection and never answers would otherwise hang create and destroy forever. (The
        abandoned request's thread ends when its connection does.)"""
        try:
            return within(REQUEST_TIMEOUT_SECONDS, f"jobs-api: {what}", lambda: operation(self.client()))
        except NoAnswer:
            raise JobsApiError(
                ErrorKind.UNREACHABLE,
                f"{what} at {self.describe()}: {ErrorKind.UNREACHABLE.value} (no answer within "
                f"{REQUEST_TIMEOUT_SECONDS} s)",
            ) from None
        except Exception as error:
            kind, status = classify(error)
            if kind in (ErrorKind.UNAUTHORIZED, ErrorKind.CREDENTIALS):
                self._client = None  # mint new credentials on the next call
            detail = error.args[0] if isinstance(error, JobsApiError) else first_line(error)
            raise JobsApiError(kind, f"{what} at {self.describe()}: {kind.value} ({detail})", status) from None

    def log_tail(
        self, job_id: str, node_id: str, lines: int = LOG_TAIL_LINES, max_bytes: int = LOG_TAIL_MAX_BYTES
    ) -> bytes:
        """The last `lines` lines of a job's log, as bytes, at most `max_bytes` of them: the
        newest. When the lines are more than `max_bytes`, the older ones go, and so does the
        partial line the cut leaves first (unless that line is all there is: a line longer than
        `max_bytes` ends the log, and its newest bytes are kept).

        Ray's state API serves log files as bytes, so bytes that are not UTF-8 cannot break the
        read (the Jobs API's own log endpoint answers 500 for them), and it seeks from the end of
        the file: a read costs the same for a 1 kB and a 1 GB log. It needs the node the job's
        driver runs on (`JobDetails.driver_node_id`). The answer is streamed, so this holds at
        most `max_bytes` plus one chunk at any time, however long the lines are.
        """
        window = bytearray()
        whole_first_line = True  # whether `window` starts where a line starts
        for chunk in self._log_chunks(job_id, node_id, lines):
            window += chunk
            excess = len(window) - max_bytes
            if excess > 0:
                whole_first_line = window[excess - 1] == ord("\n")
                del window[:excess]
        # The newline that ends the log's last line does not count: that line is the only one.
        if not whole_first_line and (newline := window.find(b"\n", 0, len(window) - 1)) >= 0:
            del window[: newline + 1]
        return bytes(window)

    def log_lines(self, job_id: str, node_id: str, max_line_bytes: int = LOG_LINE_MAX_BYTES) -> Iterator[str]:
        """Every line of a job's log, from the start, streamed (never held whole), decoded
        with stray bytes replaced. A line longer than `max_line_bytes` is cut to its first
        `max_line_bytes` (no line the trainer writes comes near), so a log with no newline in
        gigabytes cannot exhaust memory either."""
        line = bytearray()
        for chunk in self._log_chunks(job_id, node_id, lines=-1):  # -1: the whole file
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                line += chunk[start : min(end, start + max(max_line_bytes - len(line), 0))]
                yield line.decode("utf-8", errors="replace")
                line.clear()
                start = end + 1
            line += chunk[start : start + max(max_line_bytes - len(line), 0)]
        if line:
            yield line.decode("utf-8", errors="replace")

    # Not Ray's state SDK (2.60): it takes no CA, loses the status classify() needs, and get_log
    # sends only this process's own token, with no timeout.
    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's alive nodes as Ray's state API lists them (GET /api/v0/nodes, what
        `ray list nodes` asks; each with its `resources_total` and `labels`), through the same
        address and credentials as the Jobs API."""
        what = "listing the cluster's nodes"
        self._fresh_headers(what)
        params = {
            "limit": str(NODE_LIST_LIMIT),
            "filter_keys": "state",
            "filter_predicates": "=",
            "filter_values": "ALIVE",
        }
        try:
            response = requests.get(
                f"{self.address}/api/v0/nodes",
                params=params,
                headers=self._headers,
                verify=self.target.verify(),
                timeout=REQUEST_TIMEOUT_SECONDS,
            )
        except OSError as error:
            raise JobsApiError(ErrorKind.UNREACHABLE, f"{what}: {first_line(error)}") from None
        if response.status_code != 200:
            kind = kind_of_status(response.status_code, response.text)
            raise JobsApiError(kind, f"{what}: HTTP {response.status_code}", response.status_code)
        try:
            answer = response.json()
            entries = answer["data"]["result"]["result"] if answer.get("result") else None
        except (ValueError, KeyError, TypeError, AttributeError):
            entries = None
        if not isinstance(entries, list):
            raise JobsApiError(ErrorKind.REJECTED, f"{what}: the answer is not Ray's node list")
        return [entry for entry in entries if isinstance(entry, dict)]

    def _fresh_headers(self, what: str) -> None:
        """Mints the client (and so this target's headers) when due, for a request sent with
        `requests` itself; a failure to do so is a JobsApiError like any other, never the raw
        error of the SDK's version check or of the auth plugin."""
        self.call(what, lambda _client: None)

    def _log_chunks(self, job_id: str, node_id: str, lines: int) -> Iterator[bytes]:
        url = f"{self.address}/api/v0/logs/file"
        params = {"submission_id": job_id, "node_id": node_id, "lines": str(lines)}
        what = f"reading the log of {job_id}"
        self._fresh_headers(what)
        try:
            with requests.get(
                url,
                params=params,
                headers=self._headers,
                verify=self.target.verify(),
                timeout=REQUEST_TIMEOUT_SECONDS,
                stream=True,
            ) as response:
                if response.status_code != 200:
                    kind = kind_of_status(response.status_code, response.text)
                    raise JobsApiError(kind, f"{what}: HTTP {response.status_code}", response.status_code)
                yield from response.iter_content(chunk_size=64 * 1024)
        except JobsApiError:
            raise
        except OSError as error:
            raise JobsApiError(ErrorKind.UNREACHABLE, f"{what}: {first_line(error)}") from None

    def cluster_check(self) -> ClusterCheck:
        """Whether the cluster is known to be gone, for a Jobs API that does not answer (see
        each target's `cluster_check`: only proof counts)."""
        return self.target.cluster_check()

    def shares_files(self) -> bool:
        return self.target.shares_files()
