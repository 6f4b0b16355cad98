"""MaxText's own config check of a job, asked of the trainer environment: the half that runs in
the project's environment (the stacks, the policies, the fit check). It builds the requests
(domain/perf/maxtext_validation.py), answers them from the cache or from this process's one
`python -m trainer.validate_config` in `.venv-trainer` (MaxText's config layer cannot be
imported here; that process imports it once and answers batch after batch), and gives the
answers in the product's words: the problems of a job's maxtextOverrides, and a step's FLOPs
and tokens as MaxText counts them.

The one module of domain/ that starts a process: it names the trainer's command by module name,
never imports it, so the trainer depends on the domain and not the reverse.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from domain.paths import MAXTEXT_CONFIG_CACHE, PROJECT_ROOT, TRAINER_LOCK, TRAINER_PYTHON
from domain.perf import maxtext_validation
from domain.perf.capacity import MAXTEXT_FLOPS, ModelFlops, llama_formula_flops
from domain.perf.fit_results import FitResult, cached_result
from domain.ray.compiler_flags import CompilerFlags
from domain.training.job import CPU_WORKER_ENV, JobError, JobSpec

# The trainer environment's side of the check (python -m ...).
TRAINER_MODULE = "trainer.validate_config"

CACHE_DIR = MAXTEXT_CONFIG_CACHE
# Importing MaxText takes ~3-20 s depending on the machine (once per process: _Checker); the
# validations themselves well under a second each. The bound of one batch's answer.
TIMEOUT_SECONDS = 300
# How long a checker asked to end (its stdin closed) has to exit before it is killed.
CLOSE_SECONDS = 10
# Environment variables of the caller's shell that MaxText would read but the job's workers do
# not have: its own M_<KEY> overrides, and XLA_FLAGS (which MaxText refuses next to
# dump_hlo_xla_flags).
_NOT_PASSED = ("XLA_FLAGS",)
_MAXTEXT_ENV_PREFIX = "M_"


def _lock_digest() -> str:
    lock = TRAINER_LOCK.read_text() if TRAINER_LOCK.exists() else ""
    return hashlib.sha256(lock.encode()).hexdigest()


def _environment() -> dict[str, str]:
    """The trainer process's environment: the caller's of the moment (sent with every batch)."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if key not in _NOT_PASSED and not key.startswith(_MAXTEXT_ENV_PREFIX)
    }
    # JAX on the CPU backend (no TPU is needed to count a target's devices) and MaxText without
    # Google Cloud clients, as for CPU workers.
    return {**kept, **CPU_WORKER_ENV, "PYTHONPATH": str(PROJECT_ROOT)}


class _Checker:
    """One `python -m trainer.validate_config` of this process's, answering batch after batch:
    importing MaxText takes seconds, so a process that asks again (a policy server, a test
    session) pays for it once. It ends when this process closes its stdin (close_checker, at
    exit) or ends."""

    def __init__(self, python: Path) -> None:
        self.python = python
        self.owner = os.getpid()
        self._work = tempfile.TemporaryDirectory(prefix="maxtext-config-")
        self._log = open(Path(self._work.name) / "checker.log", "wb")  # closed by close()
        self._asked = Path(self._work.name) / "requests.json"
        try:
            self.process = subprocess.Popen(
                [str(python), "-m", TRAINER_MODULE],
                cwd=self._work.name,
                env=_environment(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
            )
        except BaseException:
            self._log.close()
            self._work.cleanup()
            raise

    def ask(self, requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The answers to one batch: the requests go by file (a line that cannot fill the pipe
        while MaxText imports), with the caller's environment of the moment."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self._asked.write_text(json.dumps(list(requests)))
        batch = {"requests": str(self._asked), "environment": _environment()}
        try:
            self.process.stdin.write(json.dumps(batch).encode() + b"\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(self._failure()) from None
        line = _line(self.process.stdout, time.monotonic() + TIMEOUT_SECONDS)
        if line is None:
            raise RuntimeError(f"MaxText's config check did not finish within {TIMEOUT_SECONDS} s")
        if not line:
            raise RuntimeError(self._failure())
        return list(json.loads(line))

    def ended(self) -> bool:
        """Whether the process has ended (killed, or out of memory) since its last answer."""
        return self.process.poll() is not None

    def _failure(self) -> str:
        try:
            status = f"exit status {self.process.wait(timeout=CLOSE_SECONDS)}"
        except subprocess.TimeoutExpired:
            status = "its answers closed, still running"
        self._log.flush()
        text = (Path(self._work.name) / "checker.log").read_text(errors="replace")
        tail = "\n".join(text.strip().splitlines()[-5:])
        return f"MaxText's config check failed to run ({status}): {tail}"

    def close(self) -> None:
        """Ends the process (its stdin closed, it exits; killed, by its pid, if it has not within
        CLOSE_SECONDS) and removes its files."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()
        self._work.cleanup()


def _line(stream: IO[bytes], deadline: float) -> bytes | None:
    """One line from `stream`: b"" when it ended first, None when `deadline` came first."""
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            return None
        chunk = os.read(stream.fileno(), 1 << 16)
        if not chunk:
            return b""
        data += chunk
    return data


_checker: _Checker | None = None
_checker_lock = threading.Lock()


def close_checker() -> None:
    """Ends this process's trainer-environment process, if it has one (also done at exit). Gives
    up after CLOSE_SECONDS if another thread is asking it: it ends anyway when this process does,
    its stdin then closed."""
    global _checker
    if not _checker_lock.acquire(timeout=CLOSE_SECONDS):
        return
    try:
        if _checker is not None and _checker.owner == os.getpid():
            _checker.close()
        _checker = None
    finally:
        _checker_lock.release()


atexit.register(close_checker)


def _ask(requests: Sequence[Mapping[str, Any]], python: Path) -> list[dict[str, Any]]:
    """MaxText's answers to `requests`, from this process's trainer-environment process (started
    at the first ask; again after one of another interpreter, one that failed or one that ended)."""
    global _checker
    with _checker_lock:
        if _checker is not None and _checker.owner != os.getpid():
            _checker = None  # a forked child's copy of its parent's: not this process's to end or use
        if _checker is not None and (_checker.python != python or _checker.ended()):
            _checker.close()
            _checker = None
        checker = _checker or _Checker(python)
        _checker = checker
        try:
            results = checker.ask(requests)
        except BaseException:
            # Not asked again: one that failed, or gave no answer in time, is stopped.
            checker.close()
            _checker = None
            raise
    if len(results) != len(requests):
        raise RuntimeError(f"MaxText's config check answered {len(results)} of {len(requests)} configurations")
    return results


def run_requests(requests: Sequence[Mapping[str, Any]], *, python: Path | None = None) -> list[dict[str, Any]]:
    """MaxText's answer to each request: from the cache for a request already asked under this
    trainer lock, the others from this process's one in the trainer environment. Raises RuntimeError
    (or OSError) when MaxText could not be asked."""
    lock = _lock_digest()
    paths = [CACHE_DIR / f"{maxtext_validation.cache_key(request, lock)}.json" for request in requests]
    answers: list[dict[str, Any] | None] = [json.loads(path.read_text()) if path.exists() else None for path in paths]
    missing = [index for index, answer in enumerate(answers) if answer is None]
    if missing:
        python = python or (TRAINER_PYTHON if TRAINER_PYTHON.exists() else Path(sys.executable))
        fresh = _ask([requests[index] for index in missing], python)
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        for index, answer in zip(missing, fresh, strict=True):
            _record(paths[index], answer)
            # Also the answer to the same configuration asked without alternatives (a FLOPs
            # count, `model_flops`): the job's check then answers it without asking MaxText again.
            bare = maxtext_validation.without_alternatives(requests[index], answer)
            if bare is not None:
                _record(CACHE_DIR / f"{maxtext_validation.cache_key(bare, lock)}.json", answer)
            answers[index] = answer
    return [answer for answer in answers if answer is not None]


def _record(path: Path, answer: Mapping[str, Any]) -> None:
    # Written whole, then renamed: another check reading the cache meanwhile sees the answer or
    # none, never part of one.
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(answer, sort_keys=True, indent=1) + "\n")
    partial.replace(path)


def maxtext_problems(
    job: JobSpec, user_overrides: Mapping[str, Any], *, secret: bool = False, python: Path | None = None
) -> list[str]:
    """Every reason MaxText's own config layer gives for refusing `job` on its target, in the
    product's words (`user_overrides` are the maxtextOverrides setting: the keys to name).
    Raises JobError when MaxText could not be asked: the job is then not known to be valid."""
    requests = maxtext_validation.requests(job, user_overrides)
    try:
        results = run_requests(requests, python=python)
    except (RuntimeError, OSError, ValueError) as error:
        raise JobError(
            [
                f"maxtextOverrides could not be checked against MaxText's own config rules ({error}); "
                "run ./scripts/setup to install the trainer environment, then retry"
            ]
        ) from None
    return maxtext_validation.problems(requests, results, user_overrides, secret=secret)


def model_flops(job: JobSpec, *, python: Path | None = None) -> ModelFlops:
    """One training step of `job` on all its slices: its model FLOPs and tokens as MaxText
    counts them for the resolved configuration (cached with MaxText's config check: asked of
    MaxText only for a configuration not yet checked here). Where MaxText cannot be asked (no
    trainer environment) or does not count it, the Llama formula, its source and reason said
    in the result: never one in place of the other silently."""
    chips = job.max_workers * job.chips_per_host if job.use_tpu else job.max_workers
    try:
        (answer,) = run_requests([maxtext_validation.flops_request(job)], python=python)
    except (RuntimeError, OSError, ValueError) as error:
        reason = f"MaxText could not be asked ({error}); ./scripts/setup installs the trainer environment"
        return llama_formula_flops(job.maxtext_overrides, chips=chips, fallback_reason=reason)
    counted = maxtext_validation.model_flops(answer)
    if isinstance(counted, str):
        return llama_formula_flops(job.maxtext_overrides, chips=chips, fallback_reason=counted)
    return counted


def derived_values(job: JobSpec, *, python: Path | None = None) -> dict[str, Any]:
    """What MaxText derives for `job` on all its slices (maxtext_validation.DERIVED: its vocab,
    global batch, ...); empty when MaxText refuses it. Raises JobError when MaxText could not be
    asked."""
    try:
        (answer,) = run_requests([maxtext_validation.flops_request(job)], python=python)
    except (RuntimeError, OSError, ValueError) as error:
        raise JobError(
            [f"MaxText could not be asked what it derives for this job ({error}); run ./scripts/setup"]
        ) from None
    return dict(answer.get("derived") or {})


def counted_by_maxtext(job: JobSpec, result: FitResult, python: Path | None = None) -> FitResult:
    """`result` with MaxText's count of the step's tokens and FLOPs, for one recorded with
    another count (before MaxText counted them, or where it could not be asked): recounted, not
    recompiled. Unchanged when MaxText still cannot count them."""
    if not result.fits or result.model_flops_source == MAXTEXT_FLOPS:
        return result
    work = model_flops(job, python=python)
    if work.source != MAXTEXT_FLOPS and result.model_flops_source is not None:
        return result
    return dataclasses.replace(
        result,
        tokens_per_chip=work.tokens_per_chip,
        model_flops_per_chip=work.per_chip,
        model_flops_source=work.source,
    )


def recorded_result(job: JobSpec, flags: CompilerFlags | None = None) -> FitResult | None:
    """The cached fit check of exactly this configuration (with the workers' flags unless told
    otherwise), with MaxText's count of its work; None when it has not been run here."""
    cached = cached_result(job, flags)
    return counted_by_maxtext(job, cached) if cached is not None else None
