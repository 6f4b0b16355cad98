"""The resolved description of one training job: what the trainer program on the Ray cluster
needs, and nothing it would have to look up.

The workloads stack resolves it from a preset, the infra stack's shape and the user's MaxText
overrides, checks it, and passes it to the trainer as JSON on the command line.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from domain.compile_cache import compile_cache_dir
from domain.problems import ProblemsError
from domain.setting import Setting
from domain.stack_identity import StackIdentity
from domain.tpu.tpu_catalog import Accelerator
from domain.training import maxtext_config
from domain.training.dataset import Dataset
from domain.training.presets import PRESETS, Preset, maxtext_overrides

# Ray Train retries after a worker error (a Spot preemption is counted apart, without limit).
DEFAULT_MAX_FAILURES = {"multislice": 0, "elastic": 3}
# Ray Train's own convention for "no limit" (FailureConfig.max_preemption_failures): the default
# preemption budget. A Spot slice can be reclaimed any number of times in a long run; each
# resumes from the latest checkpoint, and none of them uses up maxFailures.
UNLIMITED = -1
# Every job saves a checkpoint when it is told to stop (SIGTERM, which the trainer also sends on
# Ray Train's preemption notice): MaxText's autocheckpoint, at a step all processes agree on.
SAVE_ON_SIGTERM = {"enable_autocheckpoint": "true"}
# How often an elastic job checks whether more slices have become free to grow back onto (Ray
# Train's default). Growing restarts the worker group from the latest checkpoint.
RESIZE_CHECK_SECONDS = 60.0

RUN_NAME_MAX = 64
_RUN_NAME = re.compile(rf"^[a-z0-9]([-a-z0-9_.]{{0,{RUN_NAME_MAX - 2}}}[a-z0-9])?$")
_NOT_IN_RUN_NAME = re.compile(r"[^-a-z0-9_.]+")

# Environment for CPU workers: JAX on the CPU backend, and MaxText without Google Cloud clients
# (faster start, nothing to authenticate on a laptop). MaxText's config check runs with it too.
CPU_WORKER_ENV = {"JAX_PLATFORMS": "cpu", "DECOUPLE_GCLOUD": "TRUE"}


RUN_NAME_RULE = (
    f"use lowercase letters, digits, '-', '_' or '.', at most {RUN_NAME_MAX} characters (it names the checkpoint "
    "directory)"
)
# Hex digits of the stack's identity digest in a default run name: enough to keep apart the few
# stacks that share a checkpoint root, few enough to leave the stack's name readable.
RUN_NAME_DIGEST_LENGTH = 6


def run_name_is_valid(run_name: str) -> bool:
    """Whether `run_name` can name a run (its checkpoint directory)."""
    return bool(_RUN_NAME.fullmatch(run_name))


def _run_name_problem(run_name: str) -> str | None:
    return None if run_name_is_valid(run_name) else f"is not valid; {RUN_NAME_RULE}"


def min_slices_rule(slices: int | None) -> str:
    """What minSlices may be: up to `slices`, or (not known yet) the slice count."""
    meaning = "the fewest slices an elastic job keeps training on"
    if slices is None:
        return f"use 1 to the slice count ({meaning})"
    return f"use 1 to {slices} (the slice count: {meaning})"


# The rules of the job's own choices, each declared once (domain/setting.py). The stacks' settings
# of the same names are these declarations (domain/workload_settings.py, domain/stack_settings.py), and
# resolve_job checks its arguments with them too: the fit check and the benchmarks call it with
# values that no settings reader has seen.
PRESET = Setting("string", "Training preset.", choices=tuple(PRESETS), field="preset")


def preset_names(*, on_tpu: bool) -> str:
    """The presets that train on TPU slices (or, `on_tpu` false, on a CPU-only Ray cluster), as
    messages list them: what a GKE stack (or a local one) may choose."""
    return ", ".join(preset.name for preset in PRESETS.values() if preset.runs_on_tpu == on_tpu)


RUN_NAME = Setting("string", "MaxText run name (its checkpoint directory).", check=_run_name_problem, field="run_name")
SLICES = Setting("integer", "TPU slices the job trains on.", minimum=1, field="slices")
MIN_SLICES = Setting(
    "integer",
    "Fewest slices an elastic job keeps training on.",
    default=1,
    minimum=1,
    valid=min_slices_rule(None),
    field="min_slices",
)
_DEFAULT_FAILURES = f"{DEFAULT_MAX_FAILURES['multislice']} multislice, {DEFAULT_MAX_FAILURES['elastic']} elastic"
MAX_FAILURES = Setting(
    "integer",
    f"Worker failures Ray Train recovers from (default {_DEFAULT_FAILURES}); preemptions count against "
    "maxPreemptions instead.",
    unset=_DEFAULT_FAILURES,
    minimum=0,
    valid="use 0 or more (worker errors Ray Train recovers from; preemptions count against maxPreemptions instead)",
    field="max_failures",
)
MAX_PREEMPTIONS = Setting(
    "integer",
    "Node preemptions (a Spot slice reclaimed, a node drained for preemption) Ray Train recovers from, apart "
    "from maxFailures; unset: no limit.",
    unset="no limit",
    minimum=0,
    valid="use 0 or more, or leave it unset for no limit (node preemptions Ray Train recovers from; they never "
    "use up maxFailures)",
    field="max_preemptions",
)


def topology_problem(accelerator: Accelerator, topology: str | None) -> str | None:
    """Why `topology` is no slice of `accelerator`, as the rest of `topology = VALUE ...`."""
    if topology in accelerator.shapes:
        return None
    return f"is not a topology of TPU {accelerator.name}; valid topologies: {', '.join(accelerator.shapes)}"


def _refused(*checks: tuple[Setting, Any]) -> list[str]:
    """The problems of arguments checked against their settings' declarations."""
    return [problem for entry, value in checks if (problem := entry.problem(value)) is not None]


def default_run_name(preset: str, identity: StackIdentity) -> str:
    """`<preset>-<stack>-<digest>`, the digest of the stack's organization, project and name.

    Deterministic, so a re-run resumes the stack's checkpoints; the digest keeps apart the
    checkpoint directories of same-named stacks of other projects or organizations, which share
    one checkpoint root when they train on one infra stack (its bucket) or in one checkout (its
    `.runs`). The readable part is cut to fit the run-name rule; the digest covers the full names."""
    suffix = identity.digest(RUN_NAME_DIGEST_LENGTH)
    readable = _NOT_IN_RUN_NAME.sub("-", f"{preset}-{identity.stack}".lower())
    return f"{readable[: RUN_NAME_MAX - len(suffix) - 1]}-{suffix}"


class JobError(ProblemsError):
    """A job that must not be submitted."""

    heading = "invalid training job"


@dataclass(frozen=True)
class JobSpec:
    run_name: str
    checkpoint_root: str
    preset: str
    use_tpu: bool
    accelerator_type: str | None  # Ray's name, e.g. TPU-V6E
    topology: str | None
    slices: int
    hosts_per_slice: int
    chips_per_host: int
    elastic: bool
    min_slices: int
    max_failures: int
    max_preemptions: int = UNLIMITED
    resize_check_seconds: float = RESIZE_CHECK_SECONDS
    maxtext_overrides: Mapping[str, str] = field(default_factory=dict)
    dataset: Dataset | None = None  # None: the preset's synthetic data
    # Whether MaxText keeps compiled programs in the persistent compilation cache
    # (domain/compile_cache.py: where is the cluster's to say, not the job's).
    compile_cache: bool = True

    @property
    def max_workers(self) -> int:
        return self.slices * self.hosts_per_slice

    @property
    def resources_per_worker(self) -> dict[str, float]:
        """What one Ray Train worker holds: every chip of its TPU VM, or one CPU (Ray Train's
        default for a CPU worker). The trainer asks for it; the workloads stack counts the nodes
        that can hold it while the job waits for its slices (domain/ray/queueing.py)."""
        return {"TPU": float(self.chips_per_host)} if self.use_tpu else {"CPU": 1.0}

    @property
    def num_workers(self) -> int | tuple[int, int]:
        """One Ray Train worker per TPU VM; elastic jobs run on any whole number of slices in
        [min_slices, slices]. A CPU job counts each slice as one worker, a JAX process of its
        own (the trainer joins them with jax.distributed, collectives over gloo)."""
        if self.elastic:
            return (self.min_slices * self.hosts_per_slice, self.max_workers)
        return self.max_workers

    @property
    def run_directory(self) -> str:
        return f"{self.checkpoint_root.rstrip('/')}/{self.run_name}"

    def maxtext_args(self, maxtext_package: str | None = None) -> list[str]:
        """`key=value` arguments after the base config: where to write, then the overrides, then
        the tokenizer's path on a worker whose MaxText package is at `maxtext_package` (a shipped
        tokenizer is a file of that package)."""
        pinned = {"run_name": self.run_name, "base_output_directory": self.checkpoint_root}
        tokenizer = {}
        if self.dataset is not None and maxtext_package is not None:
            tokenizer = {"tokenizer_path": self.dataset.tokenizer_path(maxtext_package)}
        return [f"{key}={value}" for key, value in {**pinned, **self.maxtext_overrides, **tokenizer}.items()]

    def compile_cache_dir(self, cluster_cache: str | None) -> str | None:
        """Where MaxText keeps this job's compiled programs: the cluster's cache (`cluster_cache`,
        what the infra stack set on its pods), else one beside the runs, shared by every run under
        the checkpoint root; None when the job runs without one."""
        if not self.compile_cache:
            return None
        return cluster_cache or compile_cache_dir(self.checkpoint_root)

    @property
    def trainer_module(self) -> str:
        return "trainer.maxtext_elastic_trainer" if self.elastic else "trainer.maxtext_multi_slice_trainer"

    @property
    def total_steps(self) -> int | None:
        steps = self.maxtext_overrides.get("steps")
        return int(steps) if steps is not None else None

    def entrypoint(self) -> str:
        """The Ray job's command: the trainer program with this job, quoted for a shell."""
        return f"python -m {self.trainer_module} --job {shlex.quote(self.to_json())}"

    def to_json(self) -> str:
        data = asdict(self)
        # A job's command, and so its submission id, as before these settings when they have
        # their defaults: synthetic data, the compilation cache on.
        if data["dataset"] is None:
            del data["dataset"]
        if data["compile_cache"]:
            del data["compile_cache"]
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        data: dict[str, Any] = json.loads(text)
        data["maxtext_overrides"] = dict(data.get("maxtext_overrides") or {})
        if data.get("dataset") is not None:
            data["dataset"] = Dataset.from_dict(data["dataset"])
        return cls(**data)


def preset_maxtext_overrides(preset_name: str, *, slices: int, elastic: bool) -> dict[str, str]:
    """The MaxText settings a job of `preset_name` has before the user's maxtextOverrides: the
    preset's, its DCN axis for `slices`, and the save on SIGTERM."""
    chosen = PRESETS[preset_name]
    resolved = {**SAVE_ON_SIGTERM, **maxtext_overrides(chosen, slices)}
    if elastic and chosen.dcn_axis:
        # The slice count changes under an elastic job: let MaxText size the DCN axis itself.
        resolved[f"dcn_{chosen.dcn_axis}_parallelism"] = "-1"
    return resolved


def _hardware_problems(chosen: Preset, hardware: str | None) -> list[str]:
    """MaxText's `hardware` other than the one the job's machines have: on TPU slices it would
    leave every chip idle while billed (a key copied from the local stack, most often)."""
    expected = "tpu" if chosen.runs_on_tpu else "cpu"
    if hardware is None or hardware == expected:
        return []
    where = (
        f"the job runs on TPU {chosen.accelerator_name} slices, whose chips would sit idle while billed"
        if chosen.runs_on_tpu
        else f"preset {chosen.name!r} runs on a CPU-only Ray cluster"
    )
    return [
        f"maxtextOverrides.hardware = {hardware!r} is not the job's hardware: {where}; remove it (preset "
        f"{chosen.name!r} trains with hardware: {expected})"
    ]


def resolve_job(
    preset_name: str,
    *,
    run_name: str,
    checkpoint_root: str,
    slices: int | None = None,
    topology: str | None = None,
    elastic: bool = False,
    min_slices: int = MIN_SLICES.default,
    max_failures: int | None = None,
    max_preemptions: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    dataset: Dataset | None = None,
    compile_cache: bool = True,
) -> JobSpec:
    """Checks everything a submission would otherwise discover on the cluster, then returns the
    job. Raises JobError listing every problem."""
    chosen = PRESETS.get(preset_name)
    if chosen is None:
        raise JobError(_refused((PRESET, preset_name)))
    problems = _refused((RUN_NAME, run_name))
    if not checkpoint_root:
        problems.append("the checkpoint root is empty; it is the infra stack's checkpointRoot output")

    if chosen.runs_on_tpu:
        accelerator = chosen.accelerator
        topology = topology or chosen.topology
        slices = chosen.slices if slices is None else slices
        shape = accelerator.shapes.get(topology or "")
        wrong_topology = topology_problem(accelerator, topology)
        if wrong_topology is not None:
            problems.append(f"topology = {topology!r} {wrong_topology}")
    else:
        accelerator, shape, slices = None, None, 1 if slices is None else slices
    # minSlices is checked against a slice count only once that is valid.
    within = replace(MIN_SLICES, maximum=slices, valid=min_slices_rule(slices))
    problems += _refused((SLICES, slices)) or _refused((within, min_slices))
    failures = DEFAULT_MAX_FAILURES["elastic" if elastic else "multislice"] if max_failures is None else max_failures
    problems += _refused((MAX_FAILURES, failures))
    if max_preemptions is not None:
        problems += _refused((MAX_PREEMPTIONS, max_preemptions))

    resolved = preset_maxtext_overrides(chosen.name, slices=max(slices, 1), elastic=elastic)
    if dataset is not None:
        resolved.update(dataset.maxtext_overrides())
        if elastic and dataset.resumable and min_slices < slices:
            problems.append(
                f"{MIN_SLICES.key} = {min_slices} with elastic = true and datasetFiles: MaxText restores the data "
                f"position only onto as many hosts as saved it (one file per host), so a restart onto fewer than "
                f"{slices} slices would lose it; set {MIN_SLICES.key} = {slices} (`pulumi config set {MIN_SLICES.key} "
                f"{slices}`: the job then resumes only on all slices), or train without elastic"
            )
    user = {str(key): str(value) for key, value in (overrides or {}).items()}
    resolved.update(user)
    problems += _hardware_problems(chosen, user.get("hardware"))
    problems += maxtext_config.override_problems(user, chips_per_slice=None, slices=max(slices, 1))
    problems += maxtext_config.value_problems({str(key): value for key, value in (overrides or {}).items()})
    if not problems and shape is not None:
        for check_slices in {min_slices, slices} if elastic else {slices}:
            problems += maxtext_config.override_problems(resolved, chips_per_slice=shape.chips, slices=check_slices)
    if problems:
        raise JobError(sorted(set(problems), key=problems.index))
    return JobSpec(
        run_name=run_name,
        checkpoint_root=checkpoint_root,
        preset=chosen.name,
        use_tpu=chosen.runs_on_tpu,
        accelerator_type=accelerator.ray_accelerator_type if accelerator else None,
        topology=topology if chosen.runs_on_tpu else None,
        slices=slices,
        hosts_per_slice=shape.vms if shape else 1,
        chips_per_host=shape.chips_per_vm if shape else 0,
        elastic=elastic,
        min_slices=min_slices if elastic else slices,
        max_failures=failures,
        max_preemptions=UNLIMITED if max_preemptions is None else max_preemptions,
        maxtext_overrides=resolved,
        dataset=dataset,
        compile_cache=compile_cache,
    )
