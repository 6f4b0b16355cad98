"""Does MaxText accept this job's configuration? Asks MaxText's own config layer, offline, in
seconds, before anything is registered or submitted.

    python -m trainer.validate_config   (in the trainer environment)

It reads batches on stdin, one JSON line each: `{"requests": PATH, "environment": {...}}`, the
path of a JSON list of requests and the asker's environment of the moment (os.environ is set to
it before the batch; what MaxText reads at import, JAX's platform, is fixed at the start). It
answers each batch with one JSON line on stdout, the list of results, and ends at the end of
stdin. Anything MaxText prints goes to stderr, so stdout carries the answers alone.

Each request is one configuration as the job's workers would start it (domain/perf/maxtext_validation.py
builds them): MaxText's `pyconfig.initialize` loads base.yml and the model's config, merges the
overrides and builds its pydantic config model, whose field types and validators are the checks
MaxText runs at job start. The target's device count comes from MaxText's own knobs for
compiling without the devices: `compile_topology` (its TPU table) for a TPU job, and
`internal_compile_num_devices` for CPU workers. Importing MaxText takes most of the time, so one
process answers every batch its asker has; each answer is cached by its request and the trainer
lock.

For an accepted configuration the answer also carries MaxText's own count of a training step's
FLOPs and tokens per device (the figures MaxText logs TFLOP/s/device and Tokens/s/device with).

The other half runs in the project's environment, domain/perf/maxtext_check.py: it builds
the requests, answers from its cache or asks this module's process (one per asking process),
and gives the answers in the product's words.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from domain.perf import maxtext_validation
from domain.training.maxtext_config import base_config_path

# Kubernetes' termination-message path: MaxText writes its config error there even outside a pod.
TERMINATION_LOG = Path("/dev/termination-log")


# --- in the trainer environment ---------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return str(value)


def _errors(error: BaseException) -> list[dict[str, Any]]:
    """MaxText's refusal as data: pydantic's errors (field location, type, input, context such
    as the allowed values or the bound), or the text of any other exception."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        return [
            {
                "loc": [str(part) for part in item.get("loc", ())],
                "type": item.get("type", ""),
                "msg": item.get("msg", ""),
                "input": _jsonable(item.get("input")) if item.get("loc") else None,
                "ctx": _jsonable({k: v for k, v in (item.get("ctx") or {}).items() if k != "error"}),
            }
            for item in error.errors(include_url=False)
        ]
    return [{"loc": [], "type": type(error).__name__, "msg": str(error), "input": None, "ctx": {}}]


def _work(config: Any) -> dict[str, Any]:
    """One training step's FLOPs (in TFLOPs) and tokens per device, counted by the functions
    MaxText logs TFLOP/s/device and Tokens/s/device with; or why they could not count them (not a
    refusal of the configuration: MaxText would train it and only its log line would lack them)."""
    from maxtext.utils import maxtext_utils

    try:
        tflops, _, _ = maxtext_utils.calculate_tflops_training_per_device(config, log=False)
        tokens = maxtext_utils.calculate_tokens_training_per_device(config)
    except Exception as error:  # any failure to count is reported, not raised
        return {maxtext_validation.FLOPS_ERROR: f"{type(error).__name__}: {error}"}
    return {maxtext_validation.MODEL_TFLOPS: float(tflops), maxtext_validation.TOKENS: float(tokens)}


def _validate(pyconfig: Any, base: str, args: Sequence[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """MaxText's errors for one configuration (empty when it accepts it) and, when it accepts
    it, the batch it derives for the target (sequences per training step and devices) and a
    step's work per device (`_work`)."""
    existed = TERMINATION_LOG.exists()
    try:
        config = pyconfig.initialize(["maxtext", base, *args])
        derived = {name: getattr(config, name) for name in maxtext_validation.DERIVED}
        return [], {**derived, **_work(config)}
    except SystemExit as stop:
        # Outside a test runner MaxText reports a config error by exiting with status 2; the
        # error it reports is the exception the exit was raised from.
        cause = stop.__context__
        return (_errors(cause) if cause is not None else _errors(stop)), {}
    except Exception as error:  # any refusal of MaxText's is an answer
        return _errors(error), {}
    finally:
        if not existed:  # MaxText's copy of the message for a pod's status: not ours to leave
            with contextlib.suppress(OSError):
                TERMINATION_LOG.unlink()


def validate(requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each request's errors, what MaxText derives from an accepted one, and, for an error of the configuration as a whole (no field named),
    which of the request's alternatives (the configuration without one user override) MaxText
    accepts or refuses for another reason: that override is the one it refuses."""
    from maxtext.configs import pyconfig

    base = str(base_config_path())
    results = []
    for request in requests:
        errors, derived = _validate(pyconfig, base, request["args"])
        whole = [error for error in errors if not error["loc"]]
        blamed = []
        if whole:
            for key, args in request.get("without", {}).items():
                if whole[0] not in _validate(pyconfig, base, args)[0]:
                    blamed.append(key)
        results.append({"errors": errors, "blamed": blamed, "derived": _jsonable(derived)})
    return results


def serve(batches: IO[str], answers: IO[str]) -> None:
    """Answers each batch read from `batches` with one line on `answers`, until `batches` ends."""
    for line in batches:
        batch = json.loads(line)
        os.environ.clear()
        os.environ.update(batch["environment"])
        answers.write(json.dumps(validate(json.loads(Path(batch["requests"]).read_text()))) + "\n")
        answers.flush()


def main() -> int:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    # MaxText's prints (and any library's) go to stderr: stdout is the answers' alone.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    from maxtext.configs import pyconfig  # noqa: F401 (imported once, before the first batch)

    serve(sys.stdin, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
