"""MaxText's own config check of a job, as data: what to ask (one configuration per device
target the job can run on), under which cache key, and its answer in the product's words.

The asking happens in the trainer environment (trainer/validate_config.py): MaxText's
`pyconfig` and its pydantic config model refuse there exactly what they would refuse when the
job starts on the cluster. Nothing here restates one of MaxText's rules: the messages come from
MaxText's errors, which name the field, the value and what the field accepts (pydantic), or state
the rule (MaxText's cross-field checks, for which the override to blame is found by asking
MaxText again without it).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from domain.perf.capacity import MAXTEXT_FLOPS, ModelFlops
from domain.setting import shown
from domain.tpu.tpu_catalog import accelerator_by_ray_type
from domain.training.job import JobSpec, preset_maxtext_overrides

SETTING = "maxtextOverrides"
# Bumped when a request or an answer changes shape: older cached answers are then not read.
# 2: an accepted configuration's answer carries MaxText's count of a step's FLOPs and tokens.
FORMAT = 3  # 3: the vocabulary and global batch among what is derived
# The run name every check uses: the job's own is checked apart (domain/training/job.py), and with it in
# the key every run of the smoke (a new run name each) would ask MaxText again.
CHECK_RUN_NAME = "config-check"
# Above this many allowed values (MaxText's model names), a message names the closest few.
LISTED_AT_MOST = 12
# What MaxText derives from an accepted configuration for its target, reported back: the
# sequences one training step trains on (its per_device_batch_size x devices, rounded down) and
# the devices it counted.
DERIVED = ("micro_batch_size_to_train_on", "num_target_devices", "vocab_size", "global_batch_size_to_train_on")
# And one training step's work per device as MaxText counts it when it logs TFLOP/s/device and
# Tokens/s/device (maxtext_utils.calculate_tflops_training_per_device and
# calculate_tokens_training_per_device), or why it could not count it.
MODEL_TFLOPS, TOKENS, FLOPS_ERROR = "model_tflops_per_device", "tokens_per_device", "model_flops_error"
BATCH_KEY = "per_device_batch_size"
_QUOTED = re.compile(r"'([^']*)'")
_PREFIXES = ("Value error, ", "Assertion failed, ")
_SHOULD_BE = "Input should be "


def _targets(job: JobSpec) -> list[tuple[str, dict[str, str]]]:
    """Each device target the job can start on (an elastic job on any slice count from its
    minimum), as MaxText counts a target's devices without them: its TPU table for the slice
    type (`compile_topology`, as the fit check compiles), or a plain count for CPU workers."""
    counts = sorted({job.min_slices, job.slices}) if job.elastic else [job.slices]
    if job.use_tpu:
        slice_type = accelerator_by_ray_type(job.accelerator_type or "").slice_type(job.topology or "")
        return [
            (
                f"{count} x {slice_type}",
                {"compile_topology": slice_type, "compile_topology_num_slices": str(count)},
            )
            for count in counts
        ]
    # A CPU job's workers are one JAX process of one CPU device each, joined by jax.distributed.
    return [
        (
            f"{count} CPU worker{'s' if count > 1 else ''}",
            {"internal_compile": "true", "internal_compile_num_devices": str(count)},
        )
        for count in counts
    ]


def _args(settings: Mapping[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in settings.items()]


def requests(job: JobSpec, user_overrides: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What to ask MaxText: per target, the job's MaxText arguments as its workers pass them,
    and for each user override the same arguments without it (the preset's value, or MaxText's
    default), to tell which override a whole-configuration error is about."""
    fixed = {
        "run_name": CHECK_RUN_NAME,
        "base_output_directory": job.checkpoint_root,
        # The trainer (CPU) or Ray Train (TPU) joins the workers' JAX processes before MaxText
        # starts; a check has none to join.
        "skip_jax_distributed_system": "true",
    }
    baseline = preset_maxtext_overrides(job.preset, slices=job.slices, elastic=job.elastic)
    user = [str(key) for key in user_overrides]
    asked = []
    for target, device_args in _targets(job):
        settings = {**job.maxtext_overrides, **fixed, **device_args}
        without = {}
        for key in user:
            others = {name: value for name, value in settings.items() if name != key}
            if key in baseline:
                others[key] = baseline[key]
            without[key] = _args(others)
        asked.append({"target": target, "args": _args(settings), "without": without})
    return asked


def flops_request(job: JobSpec) -> dict[str, Any]:
    """What to ask MaxText for the FLOPs of `job` on all its slices (the last target: the most
    slices), without the alternatives (only a refusal needs them)."""
    return requests(job, {})[-1]


def without_alternatives(request: Mapping[str, Any], answer: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request without its alternatives when its answer is also that request's answer (no
    override blamed: the alternatives changed nothing), else None. An answer cached under both
    keys lets a FLOPs count reuse the config check's process."""
    if answer.get("blamed") or not request.get("without"):
        return None
    return {**request, "without": {}}


def model_flops(answer: Mapping[str, Any]) -> ModelFlops | str:
    """MaxText's count of one step's FLOPs and tokens on all the target's devices (MaxText's
    per-device figures times the devices it counted), or why there is none."""
    derived = answer.get("derived") or {}
    if answer.get("errors"):
        return "MaxText's config refuses this configuration"
    tflops, tokens, devices = derived.get(MODEL_TFLOPS), derived.get(TOKENS), derived.get(DERIVED[1])
    if tflops is None or tokens is None or not devices:
        return f"MaxText could not count its FLOPs ({derived.get(FLOPS_ERROR) or 'no count in its answer'})"
    return ModelFlops(
        per_step=float(tflops) * 1e12 * int(devices),
        tokens_per_step=float(tokens) * int(devices),
        chips=int(devices),
        source=MAXTEXT_FLOPS,
    )


def cache_key(request: Mapping[str, Any], lock_digest: str) -> str:
    """An answer's key: everything MaxText is asked, and the trainer lock (MaxText's version)."""
    payload = {"format": FORMAT, "request": dict(request), "trainer_lock_sha256": lock_digest}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def _text(message: str) -> str:
    for prefix in _PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _valid(error: Mapping[str, Any], value: Any, secret: bool) -> str:
    """What the field accepts, from pydantic's own error: the allowed values (an enum or a
    literal), or the bound or type it wants."""
    expected = (error.get("ctx") or {}).get("expected")
    if expected:
        options = _QUOTED.findall(str(expected))
        if len(options) > LISTED_AT_MOST:
            close = [] if secret else difflib.get_close_matches(str(value), options, n=3, cutoff=0.5)
            closest = f"; the closest: {', '.join(map(repr, close))}" if close else ""
            return f"use one of the {len(options)} values MaxText accepts for it{closest}"
        return f"use {expected}"
    message = str(error.get("msg", ""))
    if message.startswith(_SHOULD_BE):
        wanted = message[len(_SHOULD_BE) :]
        return f"use {wanted}" if wanted.startswith(("a ", "an ")) else f"use a value {wanted}"
    return f"MaxText says: {_text(message)}"


def _redacted(text: str, values: Sequence[str]) -> str:
    for value in sorted(values, key=len, reverse=True):
        if value:
            text = re.sub(rf"(?<![\w.]){re.escape(value)}(?![\w.])", "[secret]", text)
    return text


def _empty_batch(
    request: Mapping[str, Any], answer: Mapping[str, Any], user: Mapping[str, Any], secret: bool
) -> str | None:
    """A configuration MaxText accepts although its training batch is empty: a fractional
    per_device_batch_size below one sequence for the whole target. MaxText then runs every
    step on no data (loss 0, total_weights 0) and reports success."""
    derived = answer.get("derived") or {}
    batch, devices = derived.get(DERIVED[0]), derived.get(DERIVED[1])
    if batch is None or not devices or batch >= 1:
        return None
    prefix = f"{BATCH_KEY}="
    value = user.get(BATCH_KEY, next((arg[len(prefix) :] for arg in request["args"] if arg.startswith(prefix)), ""))
    named = f"{SETTING}.{BATCH_KEY} = {'[secret]' if secret else shown(value)}"
    if BATCH_KEY not in user:
        named = f"{named} (not an override: the preset's value)"
    return (
        f"{named} gives a training batch of {batch} sequences on {request['target']} ({devices} device{'s' if devices != 1 else ''} x "
        f"{BATCH_KEY}, rounded down, as MaxText computes it): every step would train on nothing; use at least "
        f"{1 / devices:g} (one sequence per step)"
    )


def problems(
    asked: Sequence[Mapping[str, Any]],
    answers: Sequence[Mapping[str, Any]],
    user_overrides: Mapping[str, Any],
    *,
    secret: bool = False,
) -> list[str]:
    """MaxText's refusals in the product's words, each once: a field's error names the override
    (`maxtextOverrides.KEY = VALUE`) and what the field accepts; an error of the configuration
    as a whole names the overrides MaxText accepts the job without, and MaxText's rule, for the
    targets where it applies. `secret` leaves the values out."""
    user = {str(key): value for key, value in user_overrides.items()}
    secret_values = [str(value) for value in user.values()] if secret else []
    fields: list[str] = []
    whole: dict[tuple[tuple[str, ...], str], list[str]] = {}
    for request, answer in zip(asked, answers, strict=True):
        for error in answer.get("errors", ()):
            loc = [str(part) for part in error.get("loc") or ()]
            if loc:
                key = ".".join(loc)
                value = user.get(key, error.get("input"))
                named = f"{SETTING}.{key} = {'[secret]' if secret else shown(value)}"
                if key not in user:
                    named = f"{named} (not an override: MaxText's value for this job)"
                message = f"{named} is refused by MaxText's config; {_valid(error, value, secret)}"
                if message not in fields:
                    fields.append(message)
            else:
                blamed = tuple(key for key in answer.get("blamed", ()) if key in user)
                text = _redacted(_text(str(error.get("msg", ""))), secret_values)
                whole.setdefault((blamed, text), []).append(str(request["target"]))
        empty = _empty_batch(request, answer, user, secret)
        if empty and empty not in fields:
            fields.append(empty)
    messages = list(fields)
    for (blamed, text), targets in whole.items():
        on = " and ".join(dict.fromkeys(targets))
        if blamed:
            named = " with ".join(f"{SETTING}.{key} = {'[secret]' if secret else shown(user[key])}" for key in blamed)
            messages.append(f"{named} is refused by MaxText's config on {on}: {text}")
        else:
            messages.append(f"{SETTING}: MaxText's config refuses this job on {on}: {text}")
    return messages
