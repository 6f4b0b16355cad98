"""The workloads stack's settings record: each setting declared once, as a field of
`WorkloadSettings` (see domain/setting.py), with its default, its rule for one value, where it does
nothing (`When`), and what derives from the fields (the stack's identity, the job's dataset). The
checks of several settings together and the reading of a stack's config are domain/config/
workload_settings.py's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePosixPath
from typing import Any

from domain.paths import LOCAL_RUNS
from domain.setting import Field, setting
from domain.stack_identity import StackIdentity
from domain.training.dataset import DEFAULT_TOKENIZER, GRAIN, HUGGING_FACE, SHIPPED_TOKENIZERS, Dataset
from domain.training.job import MAX_FAILURES, MAX_PREEMPTIONS, MIN_SLICES, PRESET, RUN_NAME, default_run_name
from domain.training.presets import PRESETS

# The job's two deadlines (workloads/ray_job/wait.py enforces them): the wait for its slices, from the
# job's start until its first worker group starts, and the run, from then until the job ends.
QUEUE_TIMEOUT_SECONDS = 60 * 60
# At least what a driver needs to start Ray Train and place a worker group on slices that are up;
# at most a week, which is no longer a wait for capacity but a job to submit again.
QUEUE_TIMEOUT_RANGE = (30, 7 * 24 * 60 * 60)
TIMEOUT_SECONDS = 6 * 60 * 60


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
        default=LOCAL_RUNS,
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
