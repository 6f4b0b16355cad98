"""The workloads stack's settings, parsed once from raw stack config into a validated
`WorkloadSettings` (the record, domain/workload_settings.py), with the checks of several settings.

A workloads stack reaches its Ray cluster one of two ways: `infraStack` names the infra stack
whose outputs (cluster endpoint, head service, preset, shape) it reads, or `address` is a Ray
dashboard URL reached directly (the local stack, a CPU-only Ray head on this machine).

Every problem the stack file alone shows is reported at once, each naming the setting, the value
and what would be valid; what needs the infra stack's outputs (its accelerator, slices and
topology) is checked when the job is resolved (domain/training/job.py), still before anything is
submitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from domain.config.raw_config import read
from domain.config.runtime_env_rules import installs, libtpu_problems, platform_problems, runtime_env_problems
from domain.problems import ProblemsError
from domain.setting import Field, Partial, Reading, Setting, as_boolean, settings_of, shown
from domain.training import maxtext_config
from domain.training.dataset import DATA_KEYS, SHIPPED_TOKENIZERS, file_type, tokenizer_type
from domain.training.job import preset_names
from domain.training.presets import PRESETS
from domain.workload_settings import Target, When, WorkloadSettings


class WorkloadSettingsError(ProblemsError):
    """Workloads stack config that cannot run a job."""

    heading = "invalid workloads stack configuration"


class PartialWorkloadSettings(Partial, WorkloadSettings):
    """WorkloadSettings as read so far, each field None where unset or refused (`Partial`): what the
    checks of several settings read."""


# A setting by its field, for checks and messages to name it by (`_F.dataset_files`; mypy knows each).
_F = WorkloadSettings


def key(field: Field[Any]) -> str:
    """A field's setting as the user types it (`datasetFiles`), as messages name it."""
    return field.setting.key


def _dataset_problems(
    reading: Reading[WorkloadSettings], settings: PartialWorkloadSettings, *, local: bool, on_infra: bool
) -> list[str]:
    """The data settings on their own and together (what needs MaxText's or the infra stack's view
    of the job is checked when the job is resolved: workloads/job_resolution.py)."""
    files, hf = settings.dataset_files, settings.hugging_face_dataset
    files_key, hf_key = reading.key(_F.dataset_files), reading.key(_F.hugging_face_dataset)
    evals_key, interval_key = reading.key(_F.eval_files), reading.key(_F.eval_interval)
    problems = []
    if files is not None and hf is not None:
        problems.append(
            f"set one of {files_key} (files read by Grain, resumable) or {hf_key} (a stream that restarts "
            "from its beginning after every restart), not both"
        )
    for field in (_F.dataset_files, _F.eval_files):
        pattern = reading.value(field)
        if pattern is None:
            continue
        stated = reading.stated(field)
        if file_type(pattern) is None:
            problems.append(
                f"{stated} names neither ArrayRecord (.array_record) nor Parquet (.parquet) "
                "files; end the pattern with one of those suffixes (python -m trainer.prepare_data writes ArrayRecord)"
            )
        if "://" in pattern:
            where = "the infra stack's dataset bucket (its datasetRoot output)" if on_infra else "the project root"
            problems.append(
                f"{stated} is a URL; give a pattern relative to {where}, for example "
                "corpus/data-*-of-00008.array_record"
            )
        elif on_infra and pattern.startswith("/"):
            problems.append(
                f"{stated} is an absolute path; on GKE give a pattern relative to the infra "
                "stack's dataset bucket (its datasetRoot output), for example corpus/data-*-of-00008.array_record"
            )
    if settings.eval_files is not None and files is None:
        problems.append(f"{evals_key} is set without {files_key}: evaluation reads files only beside training files")
    if (settings.eval_files is None) != (settings.eval_interval is None):
        problems.append(
            f"set {evals_key} and {interval_key} together: {evals_key} says what to evaluate on, {interval_key} how "
            f"many steps apart (`pulumi config set {interval_key} 100`)"
        )
    tokenizer = settings.tokenizer
    if tokenizer is not None and tokenizer_type(tokenizer) is None:
        problems.append(
            f"{reading.stated(_F.tokenizer)} is neither a tokenizer MaxText ships ("
            f"{', '.join(SHIPPED_TOKENIZERS)}) nor a tokenizer file (.tiktoken, .model or .json)"
        )
    if settings.epochs is not None and files is None:
        problems.append(
            f"{reading.stated(_F.epochs)} does nothing on this stack: it counts passes over {files_key}; "
            f"unset it (`pulumi config rm {reading.key(_F.epochs)}`)"
        )
    if hf is not None and settings.elastic and not settings.hugging_face_not_resumable:
        problems.append(
            f"{reading.stated(_F.hugging_face_dataset)} with elastic = true: the elastic trainer "
            "restarts after failures and resizes, and a Hugging Face stream starts again from its beginning at every "
            "restart, repeating examples; prepare the corpus as files (python -m trainer.prepare_data) and set "
            f"{files_key}, or acknowledge it with `pulumi config set {reading.key(_F.hugging_face_not_resumable)} "
            "true`"
        )
    return problems


def _ignored_problems(reading: Reading[WorkloadSettings], target: Target) -> list[str]:
    """Settings set (to anything but their default) on a stack where they do nothing (`When`)."""
    data = f"set {key(_F.dataset_files)} or {key(_F.hugging_face_dataset)}"
    ignored: list[tuple[When, Setting, str]] = []
    for entry in settings_of(WorkloadSettings):
        if entry.ignored_when is not None:
            when, why = entry.ignored_when
            assert isinstance(when, When), f"{entry.key}: ignored_when takes a When"
            ignored.append((when, entry, why))
    problems = []
    for when, entry, why in sorted(ignored, key=lambda each: list(When).index(each[0])):
        if when(target) and reading.changed(entry.field):
            why = f"{why}; {data}" if when is When.SYNTHETIC else why
            problems.append(
                f"{reading.stated(entry.field)} does nothing on this stack: {why}; unset it "
                f"(`pulumi config rm {reading.key(entry.field)}`)"
            )
    return problems


def _cache_problems(reading: Reading[WorkloadSettings], settings: PartialWorkloadSettings) -> list[str]:
    """MaxText's dump_hlo turns its compilation cache off (it skips the cache so that it can dump
    what it compiles): say so unless the stack turned the cache off itself."""
    dump = (settings.maxtext_overrides or {}).get("dump_hlo")
    if dump is None or not settings.compile_cache or as_boolean(dump) is not True:
        return []
    return [
        f"{reading.key(_F.maxtext_overrides)}.dump_hlo = {shown(dump)} turns the persistent compilation cache off "
        "(MaxText skips the cache so that it can dump the HLO it compiles), so every start of the job would compile "
        f"again; set {reading.key(_F.compile_cache)} false as well (`pulumi config set "
        f"{reading.key(_F.compile_cache)} false`) to train without it, or remove dump_hlo"
    ]


def parse_workload_settings(
    raw: Mapping[str, Any],
    *,
    stack: str,
    project_name: str,
    organization: str | None = None,
    secret_settings: AbstractSet[str] = frozenset(),
) -> WorkloadSettings:
    """Validates raw stack config (`project_name:key` keys stripped to `key`) of the stack
    `organization/project_name/stack`; `secret_settings` names the settings set with `pulumi config
    set --secret`. Raises WorkloadSettingsError listing every problem."""
    reading = read(WorkloadSettings, raw, project_name=project_name, secret_keys=secret_settings)
    settings, problems = reading.partial(PartialWorkloadSettings), reading.problems

    infra_stack, address = settings.infra_stack, settings.address
    # Where the job runs decides which presets fit; with both or neither set, that is the problem.
    local = reading.is_set(_F.address) and infra_stack is None
    on_infra = infra_stack is not None and not reading.is_set(_F.address)
    infra_key, address_key = reading.key(_F.infra_stack), reading.key(_F.address)
    if reading.is_set(_F.infra_stack) == reading.is_set(_F.address):
        problems.append(
            f"set exactly one of {infra_key} (the infra stack to train on, e.g. "
            f"organization/maxtext-tpu-infra/dev) or {address_key} (a Ray dashboard URL such as "
            "http://127.0.0.1:8265)"
        )
    preset = settings.preset
    chosen = PRESETS.get(preset) if preset is not None else None
    tpu_presets, cpu_presets = preset_names(on_tpu=True), preset_names(on_tpu=False)
    if local and not reading.is_set(_F.preset):
        problems.append(
            f"{reading.key(_F.preset)} is required with {address_key} (the infra stack's preset is used otherwise); "
            f"use {cpu_presets}"
        )
    if chosen is not None and local and chosen.runs_on_tpu:
        problems.append(
            f"{reading.stated(_F.preset)} trains on TPU {chosen.accelerator_name} slices, but {address_key} is a "
            f"Ray head on this machine, which has CPUs only; use {cpu_presets} with {address_key}, or set "
            f"{infra_key} (instead of {address_key}) to train on the infra stack's TPU cluster"
        )
    if chosen is not None and on_infra and not chosen.runs_on_tpu:
        problems.append(
            f"{reading.stated(_F.preset)} runs on CPU through a local Ray head, not on the infra stack's "
            f"GKE TPU cluster; unset {reading.key(_F.preset)} (the infra stack's is used) or choose a TPU preset: "
            f"{tpu_presets} (or set {address_key} instead of {infra_key} for a local run)"
        )

    overrides = settings.maxtext_overrides or {}
    problems += maxtext_config.key_problems(overrides)
    problems += maxtext_config.value_problems(overrides, secret=reading.is_secret(_F.maxtext_overrides))
    runtime_env = settings.runtime_env or {}
    secret_env = reading.is_secret(_F.runtime_env)
    problems += runtime_env_problems(runtime_env, allow_install=bool(settings.allow_runtime_install), secret=secret_env)
    if on_infra:
        problems += platform_problems(runtime_env, secret=secret_env)
    # The accelerators the job can run on: its preset's, or (the infra stack's preset being
    # unknown here) any TPU preset's; a flag all of them refuse is refused now.
    candidates = [chosen] if chosen is not None else [p for p in PRESETS.values() if p.runs_on_tpu]
    accelerators = [p.accelerator for p in candidates if p.runs_on_tpu]
    problems += libtpu_problems(runtime_env, accelerators, secret=secret_env)
    if settings.allow_runtime_install and not installs(runtime_env):
        allow_key = reading.key(_F.allow_runtime_install)
        problems.append(
            f"{allow_key} = true does nothing on this stack: {reading.key(_F.runtime_env)} installs nothing (no pip, "
            "uv, conda, py_modules, container, image_uri, java_jars or remote working_dir); unset it (`pulumi config "
            f"rm {allow_key}`)"
        )
    problems += _dataset_problems(reading, settings, local=local, on_infra=on_infra)
    problems += _cache_problems(reading, settings)
    owned = sorted(key for key in overrides if key in DATA_KEYS)
    if owned:
        data = (
            _F.dataset_files,
            _F.eval_files,
            _F.eval_interval,
            _F.tokenizer,
            _F.shuffle_seed,
            _F.packing,
            _F.epochs,
            _F.hugging_face_dataset,
        )
        problems.append(
            f"{reading.key(_F.maxtext_overrides)} sets {', '.join(owned)}, which the data settings own "
            f"({', '.join(reading.key(field) for field in data)}), where they are checked; "
            'set those instead (docs/training.md, "Training on your data")'
        )
    hugging_face = settings.hugging_face_dataset is not None
    target = Target(
        local=local,
        on_infra=on_infra,
        elastic=bool(settings.elastic),
        data=settings.dataset_files is not None or hugging_face,
        hugging_face=hugging_face,
    )
    problems += _ignored_problems(reading, target)
    reading.raise_problems(WorkloadSettingsError)
    return reading.complete(
        reading.partial(
            PartialWorkloadSettings,
            address=address.rstrip("/") if address else None,
            maxtext_overrides={str(key): str(value) for key, value in overrides.items()},
            runtime_env=dict(runtime_env),
        ),
        stack=stack,
        project=project_name,
        organization=organization,
        secrets=reading.secrets,
    )
