"""What a request to a Jobs API can come to, classified once (`JobsApiError.kind`), from HTTP
status codes, because "the job record is gone" and "the cluster did not answer" call for opposite
actions: the first lets a resource go, the second must never. `within` bounds a call that may
never answer."""

from __future__ import annotations

import enum
import json
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future

import requests

REQUEST_TIMEOUT_SECONDS = 60


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


def first_line(error: BaseException, limit: int = 300) -> str:
    """An error's first line, cut to `limit` characters: what a message quotes of it."""
    text = str(error).strip().splitlines()
    line = text[0] if text else error.__class__.__name__
    return line if len(line) <= limit else line[:limit] + "..."


class NoAnswer(Exception):
    """`within`'s operation did not finish in time. Not an OSError: `classify` never sees it, each
    caller says what the silence means."""


def within[T](seconds: float, name: str, operation: Callable[[], T]) -> T:
    """`operation()`'s value, or its exception, if it finishes within `seconds` (run in a thread
    named `name`); NoAnswer if it does not. The abandoned thread ends when its request or process
    does: the Ray SDK and the kubeconfig loader take no timeout of their own."""
    outcome: Future[T] = Future()

    def run() -> None:
        try:
            outcome.set_result(operation())
        except BaseException as error:
            outcome.set_exception(error)

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise NoAnswer(f"{name}: no answer within {seconds} s")
    return outcome.result()
