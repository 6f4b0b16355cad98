"""Reaching a Ray cluster's Jobs API: directly (a local head), or on GKE through the Kubernetes
API server's service proxy, authenticated like kubectl with the operator's own Google login.

The Jobs API runs arbitrary commands, so on GKE it is never exposed: the head service stays
ClusterIP and requests go `https://<endpoint>/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy`.
The `kubernetes` client, given the exec-form kubeconfig the infra stack exports
(`domain.gcp.kubeconfig`), runs `gke-gcloud-auth-plugin` for a short-lived token and reads the Ray
token from the Secret KubeRay generated; the GKE API is asked through google-auth. Ray's own
token (token authentication is on for every cluster we start) travels in `X-Ray-Authorization`,
the header Ray reads behind proxies: the API server consumes `Authorization`. For a local head
the Ray token is found the way Ray finds it (`RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH`,
`~/.ray/auth_token`). The cluster's CA is held in memory (see `CaBundle`): no token, credential or
CA file is left behind, and none is ever an input, an output or a log line.

Every failure is classified once, here (`JobsApiError.kind`), from HTTP status codes, because
"the job record is gone" and "the cluster did not answer" call for opposite actions: the first
lets a resource go, the second must never.
"""

from __future__ import annotations

import base64
import enum
import ipaddress
import json
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

import requests

from domain.gcp.kubeconfig import AUTH_PLUGIN, ca_apart, gke_kubeconfig
from domain.ray.kuberay import RAY_AUTH_TOKEN_KEY

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

# Tokens from the auth plugin live an hour: mint a new client well before that.
TOKEN_REFRESH_SECONDS = 30 * 60
REQUEST_TIMEOUT_SECONDS = 60
REACH_TIMEOUT_SECONDS = 10
# A tail read asks for the log's last LOG_TAIL_LINES lines and keeps at most their newest
# LOG_TAIL_MAX_BYTES, whatever the log's size (see `log_tail`).
LOG_TAIL_LINES = 500
LOG_TAIL_MAX_BYTES = 512 * 1024
# Ray's state API answers at most this many: far more than the hosts of any stack's slices.
NODE_LIST_LIMIT = 10_000
# The longest line a whole-log read keeps (the rest of a longer line is dropped).
LOG_LINE_MAX_BYTES = 64 * 1024
# The GKE API, as gcloud reaches it; gcloud's own override variable points both at another
# endpoint (tests point it at a fake one on loopback).
GKE_API_OVERRIDE_ENV = "CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER"
GKE_API_DEFAULT = "https://container.googleapis.com/"
RAY_TOKEN_HEADER = "X-Ray-Authorization"

T = TypeVar("T")


class ErrorKind(enum.Enum):
    NOT_FOUND = "not found"  # Ray itself answered 404: the job record does not exist
    UNREACHABLE = "unreachable"  # no answer: connection refused or reset, timeout, no head service
    UNAUTHORIZED = "unauthorized"  # 401/403 from the API server or from Ray
    SERVER_ERROR = "server error"  # 5xx
    CREDENTIALS = "no credentials"  # gke-gcloud-auth-plugin missing or failing (expired login)
    REJECTED = "rejected"  # any other answer (a 4xx about the request itself)


# The kinds that say nothing about the job: the cluster may come back, the job may be running.
LOST_CONTACT_KINDS = frozenset(
    {ErrorKind.UNREACHABLE, ErrorKind.UNAUTHORIZED, ErrorKind.SERVER_ERROR, ErrorKind.CREDENTIALS}
)


class JobsApiError(RuntimeError):
    def __init__(self, kind: ErrorKind, message: str, status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.status = status


def _is_kubernetes_status(body: str) -> bool:
    """Whether an answer's body is a Kubernetes `Status` object: the API server's own answer."""
    try:
        answer = json.loads(body)
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("kind") == "Status"


def kind_of_status(status: int, body: str = "") -> ErrorKind:
    """What an HTTP answer other than 200 means."""
    if status == 404:
        # The API server's own 404 (namespace or head service missing) is a Kubernetes Status
        # object, not Ray's "job does not exist": the cluster, not the job, is what is missing.
        return ErrorKind.UNREACHABLE if _is_kubernetes_status(body) else ErrorKind.NOT_FOUND
    if status in (401, 403):
        return ErrorKind.UNAUTHORIZED
    if status >= 500:
        return ErrorKind.SERVER_ERROR
    return ErrorKind.REJECTED


# The Ray Jobs SDK (2.60) gives an answer other than 200 only as the text of a RuntimeError.
_RAY_SDK_FAILED = re.compile(r"Request failed with status code (\d{3}): (.*)\.", re.DOTALL)
_RAY_SDK_NO_JOBS_API = "Version check returned 404."


def ray_sdk_answer(error: BaseException) -> tuple[ErrorKind, int] | None:
    """What the Ray SDK's RuntimeError says the answer was: the one place its text is read,
    because the SDK keeps neither the status nor the body anywhere else (tests pin it to the
    installed Ray). None for an error that is not such an answer."""
    if not isinstance(error, RuntimeError):
        return None
    text = str(error)
    if text.startswith(_RAY_SDK_NO_JOBS_API):
        return ErrorKind.UNREACHABLE, 404  # the SDK's first request found no Jobs API there at all
    match = _RAY_SDK_FAILED.fullmatch(text)
    if match is None:
        return None
    status = int(match.group(1))
    return kind_of_status(status, match.group(2)), status


def classify(error: BaseException) -> tuple[ErrorKind, int | None]:
    """What an exception from the Ray SDK, `requests` or the auth plugin means."""
    from ray.exceptions import AuthenticationError

    if isinstance(error, JobsApiError):
        return error.kind, error.status
    if isinstance(error, AuthenticationError):
        return ErrorKind.UNAUTHORIZED, None
    if isinstance(error, requests.HTTPError) and error.response is not None:
        status = error.response.status_code
        return kind_of_status(status, error.response.text), status
    # requests' exceptions are OSErrors; the SDK's version check raises the builtin ConnectionError.
    if isinstance(error, (ConnectionError, TimeoutError, OSError)):
        return ErrorKind.UNREACHABLE, None
    answer = ray_sdk_answer(error)
    return answer if answer is not None else (ErrorKind.REJECTED, None)


def _first_line(error: BaseException, limit: int = 300) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else error.__class__.__name__
    return line if len(line) <= limit else line[:limit] + "..."


def _within(seconds: float, name: str, operation: Callable[[], Any]) -> dict[str, Any]:
    """Runs `operation()` in a thread for at most `seconds`: {"value": ...} or {"error": ...}, or
    {} when it did not finish (the abandoned thread ends when its request or process does)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = operation()
        except BaseException as error:
            outcome["error"] = error

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    worker.join(seconds)
    return outcome if not worker.is_alive() else {}


@dataclass(frozen=True)
class GkeTarget:
    """Where the head service is, as the infra stack exports it (no secrets)."""

    endpoint: str
    ca_certificate: str  # base64 PEM, as GKE reports it
    namespace: str
    service: str
    port: int
    cluster_id: str | None = None  # projects/P/locations/L/clusters/N: asked when the head is silent
    auth_secret: str | None = None  # the Secret KubeRay keeps the Ray token in (RAY_AUTH_TOKEN_KEY)

    @property
    def server(self) -> str:
        return f"https://{self.endpoint}"

    @property
    def proxy_url(self) -> str:
        return f"{self.server}/api/v1/namespaces/{self.namespace}/services/{self.service}:{self.port}/proxy"

    @property
    def kubeconfig(self) -> dict[str, Any]:
        """The exec-form kubeconfig the infra stack exports as `kubeconfig`, built by the same
        function from the same endpoint and CA (so no job input changes)."""
        return gke_kubeconfig(self.cluster_id or self.endpoint, self.endpoint, self.ca_certificate)

    @classmethod
    def from_inputs(cls, values: Mapping[str, Any]) -> GkeTarget:
        return cls(
            endpoint=str(values["endpoint"]),
            ca_certificate=str(values["ca_certificate"]),
            namespace=str(values["namespace"]),
            service=str(values["service"]),
            port=int(values["port"]),
            cluster_id=values.get("cluster_id") or None,
            auth_secret=values.get("auth_secret") or None,
        )

    def as_inputs(self) -> dict[str, Any]:
        """The target as a RayJob's `gke` input holds it (from_inputs' inverse): without the
        fields it has no value for."""
        return {key: value for key, value in asdict(self).items() if value is not None}


def kube_configuration(target: GkeTarget) -> Any:
    """A `kubernetes.client.Configuration` for the target's cluster, with a fresh token: loading
    the exec-form kubeconfig runs gke-gcloud-auth-plugin.

    The CA goes to the client in memory (`ca_cert_data`), not through the loader: kubernetes
    37.0.2's loader writes `certificate-authority-data` to a `mkstemp` file that it removes only
    when the interpreter exits. The loader also swallows a failing plugin (it logs the error and
    loads no token), so a missing token is a CREDENTIALS error here."""
    from kubernetes import client, config

    kubeconfig, ca_pem = ca_apart(target.kubeconfig)
    if shutil.which(AUTH_PLUGIN) is None:
        raise JobsApiError(
            ErrorKind.CREDENTIALS,
            f"{AUTH_PLUGIN} is not installed; install it with `gcloud components install {AUTH_PLUGIN}` "
            "and log in with `gcloud auth login`",
        )
    configuration = client.Configuration()
    outcome = _within(
        REQUEST_TIMEOUT_SECONDS,
        AUTH_PLUGIN,
        lambda: config.load_kube_config_from_dict(kubeconfig, client_configuration=configuration),
    )
    if "error" in outcome:
        raise JobsApiError(
            ErrorKind.CREDENTIALS, f"the kubeconfig could not be loaded: {_first_line(outcome['error'])}"
        ) from None
    if "value" not in outcome or not configuration.api_key.get("BearerToken"):
        raise JobsApiError(
            ErrorKind.CREDENTIALS,
            f"{AUTH_PLUGIN} gave no token; your gcloud login may have expired: run `gcloud auth login`",
        )
    configuration.ca_cert_data = ca_pem
    return configuration


def _bearer_token(configuration: Any) -> str:
    """The token the exec plugin gave (the loader keeps it as the whole `Bearer <token>` value)."""
    return str(configuration.get_api_key_with_prefix("BearerToken")).removeprefix("Bearer ")


def operator_session(target: GkeTarget) -> Any:
    """A session that sends the operator's Google access token: the one gke-gcloud-auth-plugin
    gives for the cluster (it has no refresh, so a 401 is an answer, not a retry). Raises
    JobsApiError (CREDENTIALS) without one."""
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2.credentials import Credentials

    return AuthorizedSession(Credentials(_bearer_token(kube_configuration(target))), refresh_status_codes=())


class CaBundle:
    """The cluster's CA as a path, for the Ray SDK and `requests`, which take a CA bundle only as
    a path. Where the OS has anonymous memory files (Linux: memfd_create), the path is
    /proc/self/fd/N of one: no directory lists it and it is gone once closed or the process ends,
    however it ends. Elsewhere it is a file in a private temporary directory, removed by `close()`
    or, for an object never closed, when it is collected or the interpreter exits."""

    def __init__(self, pem: bytes):
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("gke-ca", os.MFD_CLOEXEC)
            self._release: weakref.finalize[..., CaBundle] = weakref.finalize(self, os.close, fd)
            with os.fdopen(os.dup(fd), "wb") as file:
                file.write(pem)
            self.path = f"/proc/self/fd/{fd}"
            if os.path.isfile(self.path):
                return
            self._release()  # no /proc to name it by (some containers): the file below instead
        directory = tempfile.mkdtemp(prefix="gke-ca-")
        self.path = os.path.join(directory, "ca.pem")
        Path(self.path).write_bytes(pem)
        self._release = weakref.finalize(self, _remove_tree, directory)

    def close(self) -> None:
        self._release()


def _remove_tree(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def local_ray_token() -> str | None:
    """The Ray token for a head reached directly, found where Ray itself looks for it."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    candidate = Path(path) if path else Path.home() / ".ray" / "auth_token"
    try:
        token = candidate.read_text().strip()
    except OSError:
        return None
    return token or None


# Answered without a token. Until a server has answered it, it is not known to be Ray, and no
# token found in the environment is sent to it.
AUTHENTICATION_MODE_PATH = "/api/authentication_mode"


def authentication_mode_of(response: requests.Response) -> str | None:
    """The mode a Ray dashboard's answer to AUTHENTICATION_MODE_PATH says; None for any other."""
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    mode = body.get("authentication_mode") if isinstance(body, dict) else None
    return mode if isinstance(mode, str) else None


def _asks_for_a_token(address: str) -> bool:
    """Whether the server at `address` has answered as a Ray dashboard that wants a token."""
    try:
        response = requests.get(f"{address.rstrip('/')}{AUTHENTICATION_MODE_PATH}", timeout=REQUEST_TIMEOUT_SECONDS)
    except requests.RequestException:
        return False  # the call that follows meets the same silence and says so
    return authentication_mode_of(response) == "token"


def _is_loopback(address: str) -> bool:
    host = urlparse(address).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ClusterCheck:
    """Whether the cluster behind a silent Jobs API is known to be gone, and how we know."""

    gone: bool
    evidence: str


class JobsApi:
    """One target's Jobs API for the length of one provider operation (use it in `with`): hands
    out a JobSubmissionClient, re-authenticating when due."""

    def __init__(self, address: str | None = None, gke: GkeTarget | Mapping[str, Any] | None = None):
        if (address is None) == (gke is None):
            raise ValueError("give exactly one of address (a Ray dashboard URL) or gke (an infra stack's cluster)")
        self.gke = gke if isinstance(gke, GkeTarget) or gke is None else GkeTarget.from_inputs(gke)
        self.address = address.rstrip("/") if address else self.gke.proxy_url  # type: ignore[union-attr]
        self._client: JobSubmissionClient | None = None
        self._headers: dict[str, str] = {}
        self._minted_at = 0.0
        self._ca: CaBundle | None = None

    def __enter__(self) -> JobsApi:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._ca is not None:
            self._ca.close()
            self._ca = None
        self._client = None

    # ------------------------------------------------------------------ describing the target

    def describe(self) -> str:
        if self.gke is None:
            return self.address
        return f"service {self.gke.service}:{self.gke.port} in namespace {self.gke.namespace} via {self.gke.endpoint}"

    def cluster_name(self) -> str:
        if self.gke is None:
            return f"the Ray head at {self.address}"
        return f"GKE cluster {self.gke.cluster_id or self.gke.endpoint}"

    def how_to_reach(self) -> str:
        if self.gke is None:
            return (
                "start the head again (`python -m workloads.smoke` starts one for you) or set "
                "`address` to a reachable Ray dashboard URL"
            )
        return (
            "check that the infra stack is up (`pulumi stack output -s <infra stack>`), that "
            "`kubectl get svc -n <namespace>` lists the head service from this machine, and that "
            "your gcloud account may use the cluster"
        )

    def fix_for(self, kind: ErrorKind) -> str:
        if kind is ErrorKind.CREDENTIALS:
            return "log in again with `gcloud auth login` (and install gke-gcloud-auth-plugin if it is missing)"
        if kind is ErrorKind.UNAUTHORIZED:
            if self.gke is None:
                return (
                    "give the head's Ray token the way Ray reads it (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH "
                    "or ~/.ray/auth_token)"
                )
            return (
                "log in again with `gcloud auth login` with an account that may read Secrets and "
                "proxy to Services in the training namespace"
            )
        return self.how_to_reach()

    # ------------------------------------------------------------------ authentication

    def _verify(self) -> str | bool:
        if self.gke is None:
            return True
        if self._ca is None:
            self._ca = CaBundle(base64.b64decode(self.gke.ca_certificate))
        return self._ca.path

    def _ray_token_from_secret(self, configuration: Any) -> str | None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        assert self.gke is not None
        if self.gke.auth_secret is None:
            return None
        what = f"reading the Ray token from Secret {self.gke.namespace}/{self.gke.auth_secret}"
        try:
            with client.ApiClient(configuration) as api_client:
                secret = client.CoreV1Api(api_client).read_namespaced_secret(
                    self.gke.auth_secret, self.gke.namespace, _request_timeout=REQUEST_TIMEOUT_SECONDS
                )
        except ApiException as error:
            if not error.status:  # the client's own failure before any answer (status 0): TLS
                raise JobsApiError(ErrorKind.UNREACHABLE, f"{what} failed: {_first_line(error)}") from None
            # No Secret: the RayCluster is not (or no longer) there.
            kind = ErrorKind.UNREACHABLE if error.status == 404 else kind_of_status(error.status)
            raise JobsApiError(kind, f"{what} failed: HTTP {error.status}", error.status) from None
        except (HTTPError, OSError) as error:
            raise JobsApiError(ErrorKind.UNREACHABLE, f"{what} failed: {_first_line(error)}") from None
        encoded = (secret.data or {}).get(RAY_AUTH_TOKEN_KEY)
        if not encoded:
            raise JobsApiError(ErrorKind.UNAUTHORIZED, f"{what}: the Secret has no {RAY_AUTH_TOKEN_KEY} key")
        return base64.b64decode(encoded).decode().strip()

    def headers(self) -> dict[str, str]:
        """Fresh headers: the operator's GKE token and the cluster's Ray token. Never logged."""
        if self.gke is None:
            token = local_ray_token() if _asks_for_a_token(self.address) else None
            return {"Authorization": f"Bearer {token}"} if token else {}
        configuration = kube_configuration(self.gke)
        headers = {"Authorization": f"Bearer {_bearer_token(configuration)}"}
        ray_token = self._ray_token_from_secret(configuration)
        if ray_token:
            headers[RAY_TOKEN_HEADER] = f"Bearer {ray_token}"
        return headers

    def client(self) -> JobSubmissionClient:
        """A JobSubmissionClient, re-created when the GKE token is due for renewal."""
        from ray.job_submission import JobSubmissionClient

        if self._client is None or time.monotonic() - self._minted_at > TOKEN_REFRESH_SECONDS:
            self._headers = self.headers()
            self._client = JobSubmissionClient(self.address, headers=self._headers or None, verify=self._verify())
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
                f"{self.address}/api/version", headers=headers, verify=self._verify(), timeout=REACH_TIMEOUT_SECONDS
            )
        except JobsApiError as error:
            raise JobsApiError(
                error.kind, f"{what} at {self.describe()} ({error}); {self.fix_for(error.kind)}"
            ) from None
        except OSError as error:
            raise JobsApiError(
                ErrorKind.UNREACHABLE,
                f"{what} at {self.describe()} ({_first_line(error)}); {self.how_to_reach()}",
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
        outcome = _within(REQUEST_TIMEOUT_SECONDS, f"jobs-api: {what}", lambda: operation(self.client()))
        if not outcome:
            raise JobsApiError(
                ErrorKind.UNREACHABLE,
                f"{what} at {self.describe()}: {ErrorKind.UNREACHABLE.value} (no answer within "
                f"{REQUEST_TIMEOUT_SECONDS} s)",
            )
        if "value" in outcome:
            return outcome["value"]
        try:
            raise outcome["error"]
        except Exception as error:
            kind, status = classify(error)
            if kind in (ErrorKind.UNAUTHORIZED, ErrorKind.CREDENTIALS):
                self._client = None  # mint new credentials on the next call
            detail = error.args[0] if isinstance(error, JobsApiError) else _first_line(error)
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
                verify=self._verify(),
                timeout=REQUEST_TIMEOUT_SECONDS,
            )
        except OSError as error:
            raise JobsApiError(ErrorKind.UNREACHABLE, f"{what}: {_first_line(error)}") from None
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
                verify=self._verify(),
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
            raise JobsApiError(ErrorKind.UNREACHABLE, f"{what}: {_first_line(error)}") from None

    def cluster_check(self) -> ClusterCheck:
        """Whether the cluster is known to be gone, for a Jobs API that does not answer.

        GKE: the GKE API is asked for the cluster; only its 404 counts. A loopback address: the
        heads this project starts (and `ray start --head --block`) take every job process down
        with them, so a port on this machine that refuses connections is a head that is gone,
        with its jobs. Anything else is not proof.
        """
        if self.gke is None:
            return self._local_head_check()
        if self.gke.cluster_id is None:
            return ClusterCheck(
                False, "the stack does not record the GKE cluster's id (re-run `pulumi up` on the infra stack)"
            )
        try:
            session = operator_session(self.gke)
        except JobsApiError as error:
            return ClusterCheck(False, f"the GKE API could not be asked: {error}")
        base = os.environ.get(GKE_API_OVERRIDE_ENV) or GKE_API_DEFAULT
        with session:
            try:
                response = session.get(f"{base.rstrip('/')}/v1/{self.gke.cluster_id}", timeout=REQUEST_TIMEOUT_SECONDS)
            except OSError as error:
                return ClusterCheck(False, f"the GKE API did not answer ({_first_line(error)})")
        if response.status_code == 404:
            return ClusterCheck(True, f"the GKE API says cluster {self.gke.cluster_id} no longer exists")
        if response.status_code == 200:
            status = response.json().get("status", "unknown")
            return ClusterCheck(False, f"GKE cluster {self.gke.cluster_id} still exists (status {status})")
        return ClusterCheck(False, f"the GKE API answered HTTP {response.status_code} for {self.gke.cluster_id}")

    def _local_head_check(self) -> ClusterCheck:
        if not _is_loopback(self.address):
            return ClusterCheck(False, f"{self.address} is not on this machine, so its silence proves nothing")
        url = urlparse(self.address)
        try:
            socket.create_connection((url.hostname, url.port or 80), timeout=5).close()
        except ConnectionRefusedError:
            return ClusterCheck(True, f"nothing listens at {self.address} any more: the local head is gone")
        except OSError as error:
            return ClusterCheck(False, f"{self.address} did not answer ({_first_line(error)})")
        # Something accepts connections: whether it answers HTTP is the rest of the evidence.
        try:
            requests.get(f"{self.address}/api/version", timeout=5)
        except OSError as error:
            return ClusterCheck(False, f"{self.address} did not answer ({_first_line(error)})")
        return ClusterCheck(False, f"a server still answers at {self.address}")
