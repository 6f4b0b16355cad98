"""The workloads stack's settings, parsed once from raw stack config and validated.

A workloads stack reaches its Ray cluster one of two ways: `infraStack` names the infra stack
whose outputs (cluster endpoint, head service, preset, shape) it reads, or `address` is a Ray
dashboard URL reached directly (the local stack, a CPU-only Ray head on this machine).

Every problem the stack file alone shows is reported at once, each naming the setting, the value
and what would be valid; what needs the infra stack's outputs (its accelerator, slices and
topology) is checked when the job is resolved (domain/training/job.py), still before anything is
submitted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePosixPath
from typing import Any

from domain.compile_cache import COMPILE_CACHE_ENV, COMPILE_CACHE_PREFIX, JAX_CACHE_ENV
from domain.problems import ProblemsError
from domain.ray.queueing import WORKER_GROUP_START_TIMEOUT_ENV
from domain.setting import Field, Partial, Reading, Setting, as_boolean, read, setting, settings_of, shown
from domain.stack_identity import StackIdentity
from domain.training import maxtext_config
from domain.training.dataset import (
    DATA_KEYS,
    DEFAULT_TOKENIZER,
    GRAIN,
    HUGGING_FACE,
    SHIPPED_TOKENIZERS,
    Dataset,
    file_type,
    tokenizer_type,
)
from domain.training.job import (
    MAX_FAILURES,
    MAX_PREEMPTIONS,
    MIN_SLICES,
    PRESET,
    RUN_NAME,
    default_run_name,
    preset_names,
)
from domain.training.presets import PRESETS

# Runtime env fields that make Ray download or install something on every worker at every job
# start, before the first step (https://docs.ray.io/en/latest/ray-core/handling-dependencies.html).
RUNTIME_INSTALLS = {
    "pip": "installs Python packages with pip",
    "uv": "installs Python packages with uv",
    "conda": "creates a conda environment",
    "py_modules": "downloads and installs Python modules",
    "container": "pulls and runs a container image",
    "image_uri": "pulls and runs a container image",
    "java_jars": "downloads Java archives",
}
_OPT_IN = (
    "the worker image already holds MaxText and the trainer; remove it, or opt in with "
    "allowRuntimeInstall: true (pulumi config set allowRuntimeInstall true)"
)


# The job's two deadlines (workloads/job_wait.py enforces them): the wait for its slices, from the
# job's start until its first worker group starts, and the run, from then until the job ends.
QUEUE_TIMEOUT_SECONDS = 60 * 60
# At least what a driver needs to start Ray Train and place a worker group on slices that are up;
# at most a week, which is no longer a wait for capacity but a job to submit again.
QUEUE_TIMEOUT_RANGE = (30, 7 * 24 * 60 * 60)
TIMEOUT_SECONDS = 6 * 60 * 60


class WorkloadSettingsError(ProblemsError):
    """Workloads stack config that cannot run a job."""

    heading = "invalid workloads stack configuration"


def _url(address: str) -> str | None:
    return None if address.startswith(("http://", "https://")) else "is not a URL; use http://HOST:8265"


# A Pulumi stack reference: ORGANIZATION/PROJECT/STACK, each part letters, digits, '-', '_' or '.'
# (https://www.pulumi.com/docs/iac/concepts/stacks/#stackreferences).
_STACK_REFERENCE = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def _stack_reference(value: str) -> str | None:
    if _STACK_REFERENCE.fullmatch(value):
        return None
    return (
        "is not a fully qualified stack name; use ORGANIZATION/PROJECT/STACK, for example "
        "organization/maxtext-tpu-infra/dev (`pulumi stack ls --all` in the project root lists them)"
    )


# A Hugging Face Hub dataset id: NAME or OWNER/NAME, letters, digits, '-', '_' and '.'.
_HUGGING_FACE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?")


def _hugging_face_id(value: str) -> str | None:
    if _HUGGING_FACE_ID.fullmatch(value):
        return None
    return "is not a Hugging Face dataset id; use NAME or OWNER/NAME, for example allenai/c4"


@dataclass(frozen=True, kw_only=True)
class Target:
    """What the stack trains on, as far as its own settings tell: what decides whether a setting does
    anything (`When`)."""

    local: bool  # a CPU job on a Ray head reached at `address`
    on_infra: bool  # a TPU job on the infra stack's cluster
    elastic: bool
    data: bool  # datasetFiles or huggingFaceDataset (else synthetic data)
    hugging_face: bool


class When(Enum):
    """A stack on which some settings do nothing, declared on each (`ignored_when`): a predicate
    over the stack's `Target`. Their messages come in this order, then in declaration order."""

    ON_INFRA = "infra"
    NO_FIT_CHECK = "local, which runs no fit check"
    LOCAL = "local"
    NOT_ELASTIC = "not elastic"
    SYNTHETIC = "synthetic"
    NO_HUGGING_FACE = "no huggingFaceDataset"

    def __call__(self, target: Target) -> bool:
        match self:
            case When.ON_INFRA:
                return target.on_infra
            case When.NO_FIT_CHECK | When.LOCAL:
                return target.local
            case When.NOT_ELASTIC:
                return not target.elastic
            case When.SYNTHETIC:
                return not target.data
            case When.NO_HUGGING_FACE:
                return not target.hugging_face


_NO_COST = "a CPU job on a local Ray head has no TPU cost estimate"
# What synthetic-data settings' messages end with (the keys are spelled out: the fields are declared below).
_SYNTHETIC = "synthetic data is not"


@dataclass(frozen=True, kw_only=True)
class WorkloadSettings:
    """What the workloads program needs to know, validated. Each `setting(...)` field is one
    stack setting, declared here and nowhere else (see domain/setting.py). A setting with
    `in_clear` cannot be kept secret, so a secret value is refused; any other secret setting
    stays secret (workloads/program.py)."""

    # Whose stack it is (not settings): the Pulumi stack's name, its project's and organization's.
    stack: str
    project: str
    organization: str | None = None  # None where no engine names one (see domain/stack_identity.py)
    secrets: frozenset[str] = frozenset()  # the settings set with `pulumi config set --secret`

    infra_stack: Field[str | None] = setting(
        "string",
        "The infra stack to train on (organization/maxtext-tpu-infra/STACK); its outputs say where and on what.",
        unset="unset (set it or address)",
        check=_stack_reference,
        in_clear="it names the StackReference resource, which the state and every preview show",
    )
    address: Field[str | None] = setting(
        "string",
        "A Ray dashboard URL reached directly (local runs), instead of infraStack.",
        check=_url,
        in_clear="it is the job's target, kept in the resources' inputs and state",
    )
    preset: Field[str | None] = setting(
        PRESET,
        f"Training preset: {', '.join(PRESETS)}; defaults to the infra stack's.",
        unset="the infra stack's",
        in_clear="it is exported as the preset output and names the default run (<preset>-<stack>-<digest>)",
    )
    run_name: Field[str | None] = setting(
        RUN_NAME,
        "MaxText run name (its checkpoint directory); defaults to <preset>-<stack>-<digest>, the "
        "digest of the stack's organization, project and name, so a re-run resumes and no same-named stack of "
        "another project or organization shares it.",
        unset="`<preset>-<stack>-<digest>`",
        in_clear="it is exported as the runName output and names the checkpoint directory",
    )
    elastic: Field[bool] = setting(
        "boolean", "Use the elastic trainer (runs on 1..all slices, resumes after failures).", default=False
    )
    min_slices: Field[int] = setting(
        MIN_SLICES,
        ignored_when=(When.NOT_ELASTIC, "only an elastic job (elastic = true) runs on fewer slices than all"),
    )
    max_failures: Field[int | None] = setting(MAX_FAILURES)
    max_preemptions: Field[int | None] = setting(MAX_PREEMPTIONS)
    maxtext_overrides: Field[Mapping[str, str]] = setting(
        "object",
        "MaxText keys to add or override (for example {steps: 200}); checked against MaxText's base.yml before "
        "submission.",
        default={},
    )
    runtime_env: Field[Mapping[str, Any]] = setting(
        "object",
        "A Ray runtime_env for the job; empty by default (the image already holds MaxText, nothing is installed). "
        "Fields that install at job start (pip, uv, conda, py_modules, a remote working_dir, container, "
        "image_uri) need allowRuntimeInstall.",
        default={},
    )
    allow_runtime_install: Field[bool] = setting(
        "boolean",
        "Let runtimeEnv install packages or pull images at every job start, on every worker (gigabytes before the "
        "first step); off, such a runtimeEnv is refused.",
        default=False,
    )
    compile_cache: Field[bool] = setting(
        "boolean",
        "Keep the job's compiled train step in a persistent compilation cache (MaxText's jax_cache_dir): on GKE "
        "the checkpoint bucket's jax-cache/ prefix, locally beside the runs under checkpointRoot. A restart, or a "
        "run of the same shape, then loads it instead of compiling again; off, every start compiles.",
        default=True,
    )
    queue_timeout_seconds: Field[int] = setting(
        "integer",
        "How long the job may wait for its slices: from the job's start until its first worker group starts. "
        "A job still waiting then is stopped and pulumi up fails, saying how many slices it asked for and how "
        "many were up.",
        default=QUEUE_TIMEOUT_SECONDS,
        minimum=QUEUE_TIMEOUT_RANGE[0],
        maximum=QUEUE_TIMEOUT_RANGE[1],
        valid=f"use {QUEUE_TIMEOUT_RANGE[0]} to {QUEUE_TIMEOUT_RANGE[1]} seconds (7 days; default "
        f"{QUEUE_TIMEOUT_SECONDS}, 1 hour): fewer would stop a job whose slices are up before its worker group "
        "has started",
    )
    timeout_seconds: Field[int] = setting(
        "integer",
        "How long the job may run: from its first worker group's start until it ends (its wait for slices "
        "before that is bounded by queueTimeoutSeconds). On timeout it is stopped and pulumi up fails.",
        default=TIMEOUT_SECONDS,
        minimum=1,
        valid=f"use 1 or more seconds (default {TIMEOUT_SECONDS}, 6 hours)",
    )
    checkpoint_root: Field[str] = setting(
        "string",
        "Checkpoint root for local runs (relative to the project root); GKE stacks use the infra stack's.",
        default=".runs",
        ignored_when=(When.ON_INFRA, "a GKE job writes to the infra stack's checkpointRoot output (its bucket)"),
    )
    assumed_mfu: Field[float] = setting(
        "number",
        "Model FLOPs utilization assumed by the cost estimate, a fraction (MaxText's published v6e Llama 3 runs "
        "reach 0.46-0.48).",
        default=0.40,
        above=0,
        maximum=1,
        valid="use a fraction in (0, 1], for example 0.4",
        ignored_when=(When.LOCAL, f"{_NO_COST} to use it in"),
    )

    dataset_files: Field[str | None] = setting(
        "string",
        "Training data: a pattern of ArrayRecord (.array_record) or Parquet (.parquet) files whose records have a "
        "`text` feature or column (python -m trainer.prepare_data makes them). On GKE, relative to the infra stack's "
        "dataset bucket (its datasetRoot output); on a local stack, a path (relative to the project root). Read by "
        "Grain, whose position is saved with every checkpoint.",
        unset="synthetic data (the presets' benchmark data)",
    )
    eval_files: Field[str | None] = setting(
        "string",
        "Evaluation data, a pattern as datasetFiles; evaluated every evalInterval steps.",
        unset="no evaluation",
    )
    eval_interval: Field[int | None] = setting(
        "integer", "Steps between evaluations of evalFiles.", unset="unset (required with evalFiles)", minimum=1
    )
    tokenizer: Field[str] = setting(
        "string",
        "The tokenizer: one MaxText ships, by name (" + ", ".join(SHIPPED_TOKENIZERS) + "), or a file (.tiktoken, "
        ".model or .json) on the dataset mount or, locally, a path.",
        default=DEFAULT_TOKENIZER,
        ignored_when=(When.SYNTHETIC, f"{_SYNTHETIC} tokenized"),
    )
    shuffle_seed: Field[int] = setting(
        "integer",
        "Seed of the data's shuffle (MaxText's data_shuffle_seed).",
        default=0,
        minimum=0,
        ignored_when=(When.SYNTHETIC, f"{_SYNTHETIC} shuffled"),
    )
    packing: Field[bool] = setting(
        "boolean",
        "Pack several documents into each sequence (MaxText's packing).",
        default=True,
        ignored_when=(When.SYNTHETIC, f"{_SYNTHETIC} packed"),
    )
    epochs: Field[int | None] = setting(
        "integer",
        "Passes over datasetFiles the run may make; unset, one, and the corpus must cover steps x global batch.",
        unset="one pass",
        minimum=1,
    )
    hugging_face_dataset: Field[str | None] = setting(
        "string",
        "A Hugging Face dataset streamed instead of datasetFiles (MaxText's hf_path, e.g. allenai/c4). Not "
        "resumable: after any restart it starts again from its beginning.",
        check=_hugging_face_id,
    )
    hugging_face_not_resumable: Field[bool] = setting(
        "boolean",
        "Acknowledge that huggingFaceDataset restarts from its beginning after every restart, repeating examples; "
        "required with it on preemptible capacity or with the elastic trainer.",
        default=False,
        ignored_when=(When.NO_HUGGING_FACE, "it acknowledges what huggingFaceDataset does"),
    )

    fit_check_result: Field[str | None] = setting(
        "string",
        "A fit check's JSON result for this job's configuration (python -m trainer.fit_check ... --output FILE, "
        "relative to the project root); its predicted step time drives the estimates. Default: this checkout's "
        "fit-check cache, when it holds this exact configuration.",
        unset="unset (the fit-check cache is used)",
        ignored_when=(When.NO_FIT_CHECK, f"{_NO_COST} to drive"),
    )

    @property
    def identity(self) -> StackIdentity:
        return StackIdentity(organization=self.organization, project=self.project, stack=self.stack)

    def dataset(self, root: str) -> Dataset | None:
        """The data the job reads, its file patterns under `root` (where the workers see the
        dataset: the infra stack's datasetRoot, or the project root); None for synthetic data."""
        if self.dataset_files is None and self.hugging_face_dataset is None:
            return None

        def under(pattern: str | None) -> str | None:
            return None if pattern is None else str(PurePosixPath(root) / pattern)

        tokenizer = self.tokenizer if self.tokenizer in SHIPPED_TOKENIZERS else under(self.tokenizer)
        assert tokenizer is not None
        return Dataset(
            kind=GRAIN if self.dataset_files is not None else HUGGING_FACE,
            tokenizer=tokenizer,
            shuffle_seed=self.shuffle_seed,
            packing=self.packing,
            epochs=self.epochs,
            files=under(self.dataset_files),
            eval_files=under(self.eval_files),
            eval_interval=self.eval_interval,
            hf_path=self.hugging_face_dataset,
        )

    def is_secret(self, field: Field[Any]) -> bool:
        """Whether the setting of `field` (`WorkloadSettings.runtime_env`) is set with `pulumi config set --secret`."""
        return field.setting.key in self.secrets

    def run_name_for(self, preset: str) -> str:
        """`runName` as set, else the stack's own default (domain/training/job.py)."""
        return self.run_name or default_run_name(preset, self.identity)


class PartialWorkloadSettings(Partial, WorkloadSettings):
    """WorkloadSettings as read so far, each field None where unset or refused (`Partial`): what the
    checks of several settings read."""


# A setting by its field, for checks and messages to name it by (`NAMES.dataset_files`; mypy knows each).
NAMES = _F = WorkloadSettings


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


def _libtpu_problems(runtime_env: Mapping[str, Any], accelerators: list[Any], *, secret: bool) -> list[str]:
    """Flags in the job's own LIBTPU_INIT_ARGS that every accelerator the job can run on refuses
    (domain/tpu/tpu_catalog.py): the job would fail at its first step."""
    env_vars = runtime_env.get("env_vars")
    init_args = env_vars.get("LIBTPU_INIT_ARGS") if isinstance(env_vars, dict) else None
    if not isinstance(init_args, str) or not accelerators:
        return []
    problems = []
    for flag, why in accelerators[0].refused_libtpu_flags(init_args):
        if all(flag in dict(other.refused_libtpu_flags(flag)) for other in accelerators[1:]):
            problems.append(
                f"runtimeEnv.env_vars.LIBTPU_INIT_ARGS has the flag {'[secret]' if secret else repr(flag)}: {why}; "
                f"remove that flag (the workers already run with the catalog's flags for TPU {accelerators[0].name})"
            )
    return problems


# JAX's platform choice: a list in JAX_PLATFORMS (in order of preference), one name in the older
# JAX_PLATFORM_NAME. Without tpu in it, JAX on a TPU host computes on the host's CPUs.
JAX_PLATFORM_VARIABLES = ("JAX_PLATFORMS", "JAX_PLATFORM_NAME")


def _platform_problems(runtime_env: Mapping[str, Any], *, secret: bool) -> list[str]:
    """JAX told to use other platforms than the TPUs a GKE job pays for."""
    env_vars = runtime_env.get("env_vars")
    if not isinstance(env_vars, dict):
        return []  # refused on its own (_runtime_env_problems)
    problems = []
    for name in JAX_PLATFORM_VARIABLES:
        value = env_vars.get(name)
        if isinstance(value, str) and "tpu" not in [part.strip().lower() for part in value.split(",")]:
            shown = "[secret]" if secret else repr(value)
            problems.append(
                f"runtimeEnv.env_vars.{name} = {shown} keeps JAX off the TPUs: the job would train on the hosts' "
                "CPUs while every chip of its slices sits idle, billed; remove it (JAX finds the TPUs itself), or "
                "list tpu first"
            )
    return problems


def _install_of(key: str, value: Any) -> str | None:
    """What a runtime env field installs at every job start, or None."""
    if key in RUNTIME_INSTALLS:
        return RUNTIME_INSTALLS[key]
    if key == "working_dir" and "://" in str(value):
        return "downloads and unpacks a remote archive"
    return None


def _installs(runtime_env: Mapping[str, Any]) -> bool:
    return any(_install_of(key, value) is not None for key, value in runtime_env.items())


def _runtime_env_problems(runtime_env: Mapping[str, Any], *, allow_install: bool, secret: bool) -> list[str]:
    def named(key: str, value: Any) -> str:
        return f"runtimeEnv.{key} = {'[secret]' if secret else shown(value)}"

    problems = []
    for key, value in runtime_env.items():
        what = _install_of(key, value)
        if what is not None and not allow_install:
            problems.append(
                f"{named(key, value)} {what} at every job start, on every worker, before the first "
                f"step (gigabytes for MaxText's dependencies, paid in TPU time); {_OPT_IN}"
            )
    env_vars = runtime_env.get("env_vars")
    if env_vars is not None and not isinstance(env_vars, dict):
        problems.append(f"{named('env_vars', env_vars)} is not a map; give names and their values as text")
    elif env_vars:
        for name, value in env_vars.items():
            if name == WORKER_GROUP_START_TIMEOUT_ENV:
                problems.append(
                    f"{named(f'env_vars.{name}', value)} is the job's queue deadline, which queueTimeoutSeconds "
                    "sets; remove it from runtimeEnv and set queueTimeoutSeconds instead (`pulumi config set "
                    "queueTimeoutSeconds SECONDS`)"
                )
            elif name == JAX_CACHE_ENV:
                problems.append(
                    f"{named(f'env_vars.{name}', value)} does nothing: MaxText sets JAX's compilation cache itself "
                    f"(its jax_cache_dir), which the job points at the stack's persistent cache ({CACHE_WHERE}); "
                    "remove it (`pulumi config set compileCache false` trains without a cache)"
                )
            elif name == COMPILE_CACHE_ENV:
                problems.append(
                    f"{named(f'env_vars.{name}', value)} would move the job's compilation cache, which is the "
                    f"cluster's ({CACHE_WHERE}): anyone who can write a cache can run code in the job; remove it "
                    "(`pulumi config set compileCache false` trains without a cache)"
                )
            elif not isinstance(value, str):
                problems.append(
                    f"{named(f'env_vars.{name}', value)} is not text; quote it (Ray sets environment variables as text)"
                )
    return problems


# Where the stack's compilation cache is, as messages say it.
CACHE_WHERE = (
    f"the checkpoint bucket's {COMPILE_CACHE_PREFIX}/ prefix on GKE, checkpointRoot/{COMPILE_CACHE_PREFIX} locally"
)


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
    problems += _runtime_env_problems(
        runtime_env, allow_install=bool(settings.allow_runtime_install), secret=secret_env
    )
    if on_infra:
        problems += _platform_problems(runtime_env, secret=secret_env)
    # The accelerators the job can run on: its preset's, or (the infra stack's preset being
    # unknown here) any TPU preset's; a flag all of them refuse is refused now.
    candidates = [chosen] if chosen is not None else [p for p in PRESETS.values() if p.runs_on_tpu]
    accelerators = [p.accelerator for p in candidates if p.runs_on_tpu]
    problems += _libtpu_problems(runtime_env, accelerators, secret=secret_env)
    if settings.allow_runtime_install and not _installs(runtime_env):
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
