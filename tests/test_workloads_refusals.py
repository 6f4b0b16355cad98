"""Bad workloads stack config, refused before anything is registered or submitted.

Each row runs the workloads program under mocks with one bad setting on a shipped stack (`dev`
with the infra outputs of tests/support/workloads_program.py, or `local`) and expects the refusal as
the domain raises it: the ProblemsError subclass itself (no SDK wrapping, no object reprs), with
exactly that one problem, naming the setting, the value and what would be valid; and nothing
registered (tests/support/refusals.py, the harness tests/test_settings_refusals.py uses too). The
shipped stacks themselves still register what they did before.
"""

from __future__ import annotations

import asyncio
import runpy
from typing import Any

import pulumi
import pytest
from pulumi.runtime import settings as runtime_settings

from domain.config.workload_settings import WorkloadSettingsError
from domain.problems import ProblemsError
from domain.ray.resource_types import RAY_JOB, RAY_JOB_GUARD
from domain.setting import settings_of
from domain.training.job import JobError
from domain.workload_settings import WorkloadSettings
from tests.support.presets import ALL_PRESETS, CPU_PRESETS, TPU_PRESETS, presets_for
from tests.support.pulumi_harness import PROJECT_ROOT, RecordingMonitor, cli_engine_config, stack_config
from tests.support.refusals import (
    UNSET,
    Bad,
    assert_distinct_cases,
    assert_names,
    assert_one_problem,
    assert_refused,
    refused_by_workloads,
)
from tests.support.workloads_program import INFRA_OUTPUTS, INFRA_STACK, PROJECT, WORKLOADS_DIR, run_workloads
from workloads.ray_job.migration import legacy_submission_id
from workloads.ray_job.record import submission_id

WORKLOAD_SETTINGS = ", ".join(entry.key for entry in settings_of(WorkloadSettings) if entry.namespace is None)
INSTALL_FIX = "remove it, or opt in with allowRuntimeInstall: true (pulumi config set allowRuntimeInstall true)"
OPT_IN = (
    "at every job start, on every worker, before the first step (gigabytes for MaxText's "
    f"dependencies, paid in TPU time); the worker image already holds MaxText and the trainer; {INSTALL_FIX}"
)
MIN_SLICES = "use 1 to the slice count (the fewest slices an elastic job keeps training on)"
MAX_FAILURES = "use 0 or more (worker errors Ray Train recovers from; preemptions count against maxPreemptions instead)"
MAX_PREEMPTIONS = (
    "use 0 or more, or leave it unset for no limit (node preemptions Ray Train recovers from; they never use up "
    "maxFailures)"
)
TIMEOUT = "use 1 or more seconds (default 21600, 6 hours)"
QUEUE_TIMEOUT = (
    "use 30 to 604800 seconds (7 days; default 3600, 1 hour): fewer would stop a job whose slices are up before its "
    "worker group has started"
)
FUSE_ALL_GATHER = "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true"
IN_CLEAR = "so it would appear in clear there; set it without --secret (`pulumi config set {key} VALUE`), or keep the value out of this stack"
UNSET_IT = "unset it (`pulumi config rm {key}`)"


def row(id: str, settings: dict[str, Any], said: str, *valid: str, **kwargs: Any) -> Bad:
    """A bad case: its one problem says `said` (the setting, its value as shown and what is wrong
    with it, in that order) and each of `valid` (what would be valid, or what to do instead),
    whatever the wording around them."""
    return Bad(id, settings, None, (said, *valid), **kwargs)


def override(id: str, key: str, value: Any, said: str, *valid: str, **kwargs: Any) -> Bad:
    """A bad MaxText override (maxtextOverrides: {key: value}); `said` follows `maxtextOverrides.KEY = `."""
    return row(id, {"maxtextOverrides": {key: value}}, f"maxtextOverrides.{key} = {said}", *valid, **kwargs)


def base(key: str, default: str) -> str:
    return f"(MaxText's base.yml: {key}: {default})"


def typed(key: str) -> str:
    """Where a refusal of an override's type says the type comes from (base.yml's default, which a
    MaxText upgrade may change, left out)."""
    return f"(MaxText's base.yml: {key}: "


# Each row names the parts of its refusal that carry meaning (the setting and its value as shown,
# what is wrong, what would be valid or what to do), not the whole text, so that a new preset (or a
# new setting, or a reworded explanation) changes no row that is not about it. Two rows pin the
# whole text on purpose, each saying why; the entry point's test below pins one of each error type.
ROWS = [
    # MaxText overrides, typed by their base.yml default.
    override("steps-text", "steps", "abc", "'abc' is not an integer", typed("steps")),
    override("steps-fraction", "steps", 1.5, "1.5 is not an integer", typed("steps")),
    override("steps-boolean", "steps", True, "true is not an integer", typed("steps")),
    override("steps-exponent", "steps", "1e3", "1e3 is not an integer", typed("steps")),
    override("max-target-length-text", "max_target_length", "long", "'long' is not an integer",
             typed("max_target_length")),
    override("checkpoint-period-text-local", "checkpoint_period", "often", "'often' is not an integer",
             typed("checkpoint_period"), stack="local"),
    override("batch-size-text", "per_device_batch_size", "four", "'four' is not a number",
             typed("per_device_batch_size")),
    override("learning-rate-text", "learning_rate", "fast", "'fast' is not a number", typed("learning_rate")),
    override("learning-rate-nan", "learning_rate", "nan", "'nan' is not a number", typed("learning_rate")),
    override("checkpointing-yes", "enable_checkpointing", "yes", "'yes' is not a boolean", "use true or false",
             typed("enable_checkpointing")),
    override("checkpointing-one", "enable_checkpointing", 1, "1 is not a boolean", "use true or false",
             typed("enable_checkpointing")),
    override("override-model-config-on-local", "override_model_config", "on", "'on' is not a boolean",
             "use true or false", typed("override_model_config"), stack="local"),
    override("ici-axis-text", "ici_fsdp_parallelism", "sixteen", "'sixteen' is not an integer",
             typed("ici_fsdp_parallelism")),
    override("dcn-axis-fraction", "dcn_data_parallelism", 2.5, "2.5 is not an integer", typed("dcn_data_parallelism")),
    override("string-key-list", "model_name", ["llama3-8b"], "['llama3-8b'] is not a single value", "give text",
             typed("model_name")),
    override("list-key-word", "mlp_activations", "silu", "'silu' is not a list", "give a YAML list such as [a, b]",
             typed("mlp_activations")),
    override("map-key-word", "vllm_hf_overrides", "big", "'big' is not a map", "give a YAML map such as {a: 1}",
             typed("vllm_hf_overrides")),
    # Keys: MaxText's (with a suggestion) and not the job's own.
    row("unknown-key-suggested", {"maxtextOverrides": {"lerning_rate": 1}},
        "maxtextOverrides: 'lerning_rate' is not a MaxText setting", "did you mean 'learning_rate'?"),
    row("unknown-key-local", {"maxtextOverrides": {"zzqx_frobnicate": 1}},
        "maxtextOverrides: 'zzqx_frobnicate' is not a MaxText setting", "use a key of MaxText's configs/base.yml",
        stack="local"),
    row("reserved-run-name", {"maxtextOverrides": {"run_name": "mine"}},
        "maxtextOverrides: MaxText key 'run_name' cannot be overridden", "use the runName setting"),
    row("reserved-output-directory", {"maxtextOverrides": {"base_output_directory": "gs://b"}},
        "maxtextOverrides: MaxText key 'base_output_directory' cannot be overridden",
        "the infra stack's checkpointRoot output, or checkpointRoot on a local stack"),
    row("reserved-compile-topology", {"maxtextOverrides": {"compile_topology": "v6e-16"}},
        "maxtextOverrides: MaxText key 'compile_topology' cannot be overridden",
        "set by the fit check from the preset's topology"),
    row("overrides-not-a-map", {"maxtextOverrides": [1, 2]},
        "maxtextOverrides = [1, 2] is not an object", "(a map of keys to values)"),
    # Ranges.
    override("steps-zero", "steps", 0, "0 is out of range", "use 1 or more (the job needs a definite step count)"),
    override("steps-minus-one", "steps", -1, "-1 is out of range",
             "use 1 or more (the job needs a definite step count)"),
    override("steps-zero-text-local", "steps", "0", "0 is out of range",
             "use 1 or more (the job needs a definite step count)", stack="local"),
    override("batch-size-zero", "per_device_batch_size", 0, "0 is out of range",
             "use a number above 0 (fractions are allowed)"),
    override("batch-size-negative", "per_device_batch_size", -2.5, "-2.5 is out of range",
             "use a number above 0 (fractions are allowed)"),
    override("learning-rate-zero", "learning_rate", 0, "0 is out of range", "use a number above 0"),
    override("learning-rate-negative", "learning_rate", "-1e-4", "-1e-4 is out of range", "use a number above 0"),
    override("max-target-length-zero", "max_target_length", 0, "0 is out of range", "use 1 or more tokens"),
    override("checkpoint-period-zero-local", "checkpoint_period", 0, "0 is out of range", "use 1 or more steps",
             stack="local"),
    override("ici-axis-zero", "ici_tensor_parallelism", 0, "0 is out of range",
             "use 1 or more, or -1 for the rest of the chips of a slice (at most one ici axis)"),
    override("ici-axis-minus-two", "ici_fsdp_parallelism", -2, "-2 is out of range",
             "use 1 or more, or -1 for the rest of the chips of a slice (at most one ici axis)"),
    override("dcn-axis-zero", "dcn_data_parallelism", 0, "0 is out of range",
             "use 1 or more, or -1 for the rest of the slices (at most one dcn axis)"),
    override("dcn-axis-minus-three", "dcn_fsdp_parallelism", "-3", "-3 is out of range",
             "use 1 or more, or -1 for the rest of the slices (at most one dcn axis)"),
    # The device mesh, against the infra stack's slices and topology (its outputs).
    row("ici-product", {"maxtextOverrides": {"ici_tensor_parallelism": 4}},
        "maxtextOverrides: ICI parallelism within a slice of 16 chips",
        "ici_tensor_parallelism=4 multiply to 64, but there are 16", "make them multiply to 16, or set one of them to -1",
        error=JobError),
    row("ici-two-wildcards", {"maxtextOverrides": {"ici_fsdp_parallelism": -1, "ici_tensor_parallelism": -1}},
        "maxtextOverrides: ICI parallelism within a slice of 16 chips",
        "only one axis may be -1 (auto), found ici_fsdp_parallelism, ici_tensor_parallelism",
        "give all but one of them a number", error=JobError),
    row("dcn-product", {"maxtextOverrides": {"dcn_data_parallelism": 3}},
        "maxtextOverrides: DCN parallelism across 2 slice(s)", "dcn_data_parallelism=3 multiply to 3, but there are 2",
        "make them multiply to 2, or set one of them to -1", error=JobError),
    row("ici-wildcard-no-divisor", {"maxtextOverrides": {"ici_fsdp_parallelism": -1, "ici_tensor_parallelism": 3}},
        "maxtextOverrides: ICI parallelism within a slice of 16 chips",
        "ici_fsdp_parallelism=-1, ici_tensor_parallelism=3 multiply to 3, but there are 16",
        "make the others multiply to a divisor of 16", error=JobError),
    # minSlices, maxFailures, timeoutSeconds.
    row("min-slices-zero", {"minSlices": 0}, "minSlices = 0 is out of range", MIN_SLICES),
    row("min-slices-zero-elastic-local", {"minSlices": 0, "elastic": True}, "minSlices = 0 is out of range", MIN_SLICES,
        stack="local"),
    row("min-slices-negative", {"minSlices": -1}, "minSlices = -1 is out of range", MIN_SLICES),
    row("min-slices-text", {"minSlices": "two"}, "minSlices = 'two' is not a whole number", MIN_SLICES),
    row("min-slices-above-infra-slices", {"elastic": True, "minSlices": 3}, "minSlices = 3 is out of range",
        "use 1 to 2 (the slice count: the fewest slices an elastic job keeps training on)", error=JobError),
    row("min-slices-without-elastic", {"minSlices": 4}, "minSlices = 4 does nothing on this stack",
        "only an elastic job (elastic = true)", UNSET_IT.format(key="minSlices")),
    row("min-slices-above-cpu-slice-local", {"minSlices": 2, "elastic": True}, "minSlices = 2 is out of range",
        "use 1 to 1 (the slice count: the fewest slices an elastic job keeps training on)", stack="local",
        error=JobError),
    row("max-failures-minus-one", {"maxFailures": -1}, "maxFailures = -1 is out of range", MAX_FAILURES),
    row("max-failures-text-local", {"maxFailures": "many"}, "maxFailures = 'many' is not a whole number", MAX_FAILURES,
        stack="local"),
    row("max-preemptions-minus-one", {"maxPreemptions": -1}, "maxPreemptions = -1 is out of range", MAX_PREEMPTIONS),
    row("timeout-zero", {"timeoutSeconds": 0}, "timeoutSeconds = 0 is out of range", TIMEOUT),
    row("timeout-negative-local", {"timeoutSeconds": -5}, "timeoutSeconds = -5 is out of range", TIMEOUT,
        stack="local"),
    row("timeout-text", {"timeoutSeconds": "1h"}, "timeoutSeconds = '1h' is not a whole number", TIMEOUT),
    row("timeout-fraction", {"timeoutSeconds": 0.5}, "timeoutSeconds = 0.5 is not a whole number", TIMEOUT),
    row("queue-timeout-below-range", {"queueTimeoutSeconds": 29}, "queueTimeoutSeconds = 29 is out of range",
        QUEUE_TIMEOUT),
    row("queue-timeout-above-range-local", {"queueTimeoutSeconds": 604801},
        "queueTimeoutSeconds = 604801 is out of range", QUEUE_TIMEOUT, stack="local"),
    row("queue-timeout-text", {"queueTimeoutSeconds": "1h"}, "queueTimeoutSeconds = '1h' is not a whole number",
        QUEUE_TIMEOUT),
    row("queue-timeout-fraction", {"queueTimeoutSeconds": 60.5}, "queueTimeoutSeconds = 60.5 is not a whole number",
        QUEUE_TIMEOUT),
    # Ray Train's worker-group start timeout is the queue deadline's (domain/ray/queueing.py).
    row("runtime-env-ray-train-start-timeout",
        {"runtimeEnv": {"env_vars": {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "30"}}},
        "runtimeEnv.env_vars.RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S = 30 is the job's queue deadline",
        "remove it from runtimeEnv and set queueTimeoutSeconds instead (`pulumi config set queueTimeoutSeconds "
        "SECONDS`)"),
    # The persistent compilation cache is the job's (docs/training.md, "Cold start, phase by phase").
    row("reserved-jax-cache-dir", {"maxtextOverrides": {"jax_cache_dir": "/tmp/cache"}},
        "maxtextOverrides: MaxText key 'jax_cache_dir' cannot be overridden",
        "set by the job to the stack's persistent compilation cache", "turn it off with the compileCache setting"),
    row("runtime-env-jax-cache-variable",
        {"runtimeEnv": {"env_vars": {"JAX_COMPILATION_CACHE_DIR": "gs://mine/cache"}}},
        "runtimeEnv.env_vars.JAX_COMPILATION_CACHE_DIR = 'gs://mine/cache' does nothing",
        "MaxText sets JAX's compilation cache itself", "`pulumi config set compileCache false`"),
    row("runtime-env-cluster-cache-variable",
        {"runtimeEnv": {"env_vars": {"MAXTEXT_TPU_COMPILE_CACHE": "gs://other/cache"}}},
        "runtimeEnv.env_vars.MAXTEXT_TPU_COMPILE_CACHE = 'gs://other/cache' would move the job's compilation cache",
        "anyone who can write a cache can run code in the job; remove it", stack="local"),
    row("dump-hlo-with-the-cache", {"maxtextOverrides": {"dump_hlo": "true"}},
        "maxtextOverrides.dump_hlo = 'true' turns the persistent compilation cache off",
        "set compileCache false as well (`pulumi config set compileCache false`)", "or remove dump_hlo"),
    row("compile-cache-not-boolean", {"compileCache": "yes"}, "compileCache = 'yes' is not a boolean",
        "use true or false"),
    # Runtime envs that install at every job start.
    row("runtime-pip", {"runtimeEnv": {"pip": ["torch"]}},
        "runtimeEnv.pip = ['torch'] installs Python packages with pip", INSTALL_FIX),
    row("runtime-pip-local", {"runtimeEnv": {"pip": {"packages": ["maxtext"]}}},
        "runtimeEnv.pip = {'packages': ['maxtext']} installs Python packages with pip", INSTALL_FIX, stack="local"),
    row("runtime-uv", {"runtimeEnv": {"uv": ["jax"]}},
        "runtimeEnv.uv = ['jax'] installs Python packages with uv", INSTALL_FIX),
    row("runtime-conda", {"runtimeEnv": {"conda": "env.yaml"}},
        "runtimeEnv.conda = 'env.yaml' creates a conda environment", INSTALL_FIX),
    row("runtime-py-modules", {"runtimeEnv": {"py_modules": ["gs://bucket/mod.zip"]}},
        "runtimeEnv.py_modules = ['gs://bucket/mod.zip'] downloads and installs Python modules", INSTALL_FIX),
    row("runtime-remote-working-dir", {"runtimeEnv": {"working_dir": "gs://bucket/code.zip"}},
        "runtimeEnv.working_dir = 'gs://bucket/code.zip' downloads and unpacks a remote archive", INSTALL_FIX),
    row("runtime-https-working-dir-local", {"runtimeEnv": {"working_dir": "https://example.com/code.zip"}},
        "runtimeEnv.working_dir = 'https://example.com/code.zip' downloads and unpacks a remote archive", INSTALL_FIX,
        stack="local"),
    row("runtime-container", {"runtimeEnv": {"container": {"image": "repo/image:1"}}},
        "runtimeEnv.container = {'image': 'repo/image:1'} pulls and runs a container image", INSTALL_FIX),
    row("runtime-image-uri", {"runtimeEnv": {"image_uri": "repo/image:1"}},
        "runtimeEnv.image_uri = 'repo/image:1' pulls and runs a container image", INSTALL_FIX),
    row("runtime-java-jars", {"runtimeEnv": {"java_jars": ["gs://bucket/a.jar"]}},
        "runtimeEnv.java_jars = ['gs://bucket/a.jar'] downloads Java archives", INSTALL_FIX),
    # The whole text on purpose: no part of a secret value may show anywhere in it, not only where
    # the value goes.
    Bad("runtime-pip-secret", {"runtimeEnv": {"pip": ["private-pkg"]}},
        f"runtimeEnv.pip = [secret] installs Python packages with pip {OPT_IN}",
        ("runtimeEnv.pip = [secret]", INSTALL_FIX), secrets=("runtimeEnv",)),
    row("runtime-pip-opt-in-declined", {"runtimeEnv": {"pip": ["torch"]}, "allowRuntimeInstall": False},
        "runtimeEnv.pip = ['torch'] installs Python packages with pip", INSTALL_FIX),
    row("runtime-env-var-number", {"runtimeEnv": {"env_vars": {"XLA_FLAGS": 1}}},
        "runtimeEnv.env_vars.XLA_FLAGS = 1 is not text", "quote it"),
    row("runtime-env-vars-list", {"runtimeEnv": {"env_vars": ["A=1"]}},
        "runtimeEnv.env_vars = ['A=1'] is not a map", "give names and their values as text"),
    row("runtime-env-not-a-map", {"runtimeEnv": "pip install torch"},
        "runtimeEnv = 'pip install torch' is not an object", "set it in the stack file as a map"),
    row("allow-runtime-install-yes", {"allowRuntimeInstall": "yes"},
        "allowRuntimeInstall = 'yes' is not a boolean", "use true or false"),
    # Presets where they cannot run (the presets they list are read from PRESETS).
    row("tpu-preset-on-local-head", {"preset": "llama3-8b"},
        "preset = 'llama3-8b' trains on TPU v6e slices, but address is a Ray head on this machine",
        f"use {CPU_PRESETS} with address, or set infraStack (instead of address)", stack="local"),
    row("70b-preset-on-local-head", {"preset": "llama3-70b"},
        "preset = 'llama3-70b' trains on TPU v6e slices, but address is a Ray head on this machine",
        f"use {CPU_PRESETS} with address, or set infraStack (instead of address)", stack="local"),
    row("cpu-preset-on-gke", {"preset": "tiny-cpu"},
        "preset = 'tiny-cpu' runs on CPU through a local Ray head, not on the infra stack's GKE TPU cluster",
        f"unset preset (the infra stack's is used) or choose a TPU preset: {TPU_PRESETS} (or set address"),
    row("unknown-preset", {"preset": "gpt"}, "preset = 'gpt' is not valid", f"choose one of: {ALL_PRESETS}"),
    row("no-preset-with-address", {"preset": UNSET}, "preset is required with address", f"; use {CPU_PRESETS}",
        stack="local"),
    row("unknown-infra-preset", {},
        f"preset = 'gpt' (the infra stack {INFRA_STACK}'s preset output) is not a preset of this checkout",
        f"set preset in this stack: use one for v6e: {presets_for('v6e')}",
        infra={**INFRA_OUTPUTS, "preset": "gpt"}, error=JobError),
    row("preset-for-another-accelerator", {"preset": "llama3-70b"},
        "preset = 'llama3-70b' is for TPU v6e, but the infra stack's cluster has v5p",
        "point infraStack at an infra stack with v6e slices",
        infra={**INFRA_OUTPUTS, "accelerator": "v5p"}, error=JobError),
    row("infra-output-missing", {}, f"the infra stack {INFRA_STACK} has no output topology",
        "check that infraStack names a deployed infra stack and run pulumi up on it",
        infra={k: v for k, v in INFRA_OUTPUTS.items() if k != "topology"}, error=JobError),
    row("infra-output-slices-zero", {}, f"the infra stack {INFRA_STACK}'s output slices = 0.0 is not",
        "a whole number of at least 1", infra={**INFRA_OUTPUTS, "slices": 0}, error=JobError),
    # Secrets that cannot stay secret.
    row("secret-run-name", {"runName": "my-run"},
        "runName is set as a secret, but it is exported as the runName output", IN_CLEAR.format(key="runName"),
        secrets=("runName",)),
    row("secret-preset-local", {"preset": "tiny-cpu"},
        "preset is set as a secret, but it is exported as the preset output", IN_CLEAR.format(key="preset"),
        secrets=("preset",), stack="local"),
    row("secret-infra-stack", {},
        "infraStack is set as a secret, but it names the StackReference resource", IN_CLEAR.format(key="infraStack"),
        secrets=("infraStack",)),
    row("secret-address-local", {},
        "address is set as a secret, but it is the job's target", IN_CLEAR.format(key="address"),
        secrets=("address",), stack="local"),
    # Where to run, and the rest.
    row("address-not-a-url", {"address": "127.0.0.1:8265"}, "address = '127.0.0.1:8265' is not a URL",
        "use http://HOST:8265", stack="local"),
    row("address-and-infra-stack", {"address": "http://127.0.0.1:8265"}, "set exactly one of infraStack (",
        "or address ("),
    # The job would run, but not on the TPUs it pays for.
    row("hardware-cpu-on-tpu", {"maxtextOverrides": {"hardware": "cpu"}},
        "maxtextOverrides.hardware = 'cpu' is not the job's hardware", "the job runs on TPU v6e slices",
        "remove it (preset 'llama3-8b' trains with hardware: tpu)", error=JobError),
    row("hardware-gpu-on-tpu", {"maxtextOverrides": {"hardware": "gpu"}},
        "maxtextOverrides.hardware = 'gpu' is not the job's hardware", "the job runs on TPU v6e slices",
        "remove it (preset 'llama3-8b' trains with hardware: tpu)", error=JobError),
    row("hardware-tpu-on-cpu", {"maxtextOverrides": {"hardware": "tpu"}},
        "maxtextOverrides.hardware = 'tpu' is not the job's hardware", "preset 'tiny-cpu' runs on a CPU-only",
        "remove it (preset 'tiny-cpu' trains with hardware: cpu)", stack="local", error=JobError),
    row("jax-platforms-cpu", {"runtimeEnv": {"env_vars": {"JAX_PLATFORMS": "cpu"}}},
        "runtimeEnv.env_vars.JAX_PLATFORMS = 'cpu' keeps JAX off the TPUs",
        "remove it (JAX finds the TPUs itself), or list tpu first"),
    row("jax-platform-name-cpu", {"runtimeEnv": {"env_vars": {"JAX_PLATFORM_NAME": "cpu"}}},
        "runtimeEnv.env_vars.JAX_PLATFORM_NAME = 'cpu' keeps JAX off the TPUs",
        "remove it (JAX finds the TPUs itself), or list tpu first"),
    row("elastic-maybe", {"elastic": "maybe"}, "elastic = 'maybe' is not a boolean", "use true or false"),
    row("run-name-spaces", {"runName": "My Run"}, "runName = 'My Run' is not valid",
        "use lowercase letters, digits, '-', '_' or '.', at most 64 characters"),
    row("assumed-mfu-percent", {"assumedMfu": "46%"}, "assumedMfu = '46%' is not a number",
        "use a fraction in (0, 1]"),
    row("assumed-mfu-above-one", {"assumedMfu": 1.5}, "assumedMfu = 1.5 is out of range", "use a fraction in (0, 1]"),
    row("fit-check-result-missing", {"fitCheckResult": "no-such-result.json"},
        "fitCheckResult = 'no-such-result.json' cannot be read as a fit check's result", "No such file or directory",
        "write one with `python -m trainer.fit_check --preset PRESET ... --output FILE`, or unset it",
        error=JobError),
    # What the result and the job differ in is left out: it follows the result's format.
    row("fit-check-result-of-another-configuration",
        {"fitCheckResult": "tests/fixtures/fit_check_other_configuration.json"},
        "fitCheckResult = 'tests/fixtures/fit_check_other_configuration.json' was compiled for another "
        "configuration than this job's",
        "rerun `python -m trainer.fit_check --preset llama3-8b --topology 4x4 --slices 2 KEY=VALUE ... --output FILE` "
        "with this job's maxtextOverrides, or unset fitCheckResult", error=JobError),
    # Settings that would do nothing on this stack (refused, not ignored).
    row("checkpoint-root-on-gke", {"checkpointRoot": "/mnt/ckpt"},
        "checkpointRoot = '/mnt/ckpt' does nothing on this stack", "the infra stack's checkpointRoot output",
        UNSET_IT.format(key="checkpointRoot")),
    row("fit-check-result-local", {"fitCheckResult": "fit.json"},
        "fitCheckResult = 'fit.json' does nothing on this stack", "a CPU job on a local Ray head",
        UNSET_IT.format(key="fitCheckResult"), stack="local"),
    row("assumed-mfu-local", {"assumedMfu": "0.5"},
        "assumedMfu = 0.5 does nothing on this stack", "a CPU job on a local Ray head",
        UNSET_IT.format(key="assumedMfu"), stack="local"),
    row("allow-runtime-install-with-nothing-to-install", {"allowRuntimeInstall": True},
        "allowRuntimeInstall = true does nothing on this stack", "runtimeEnv installs nothing",
        UNSET_IT.format(key="allowRuntimeInstall")),
    # A flag the catalog knows libtpu refuses on the only accelerator the job can run on (libtpu's
    # version, which the pin moves, left out).
    row("libtpu-flag-v6e-refuses",
        {"runtimeEnv": {"env_vars": {"LIBTPU_INIT_ARGS": f"--xla_enable_async_all_gather=true {FUSE_ALL_GATHER}"}}},
        f"runtimeEnv.env_vars.LIBTPU_INIT_ARGS has the flag '{FUSE_ALL_GATHER}'", "refuses it on v6e",
        "remove that flag"),
    row("infra-stack-not-qualified", {"infraStack": "dev"},
        "infraStack = 'dev' is not a fully qualified stack name", "use ORGANIZATION/PROJECT/STACK"),
    # Numbers of more digits than Python converts name their setting, not Python's limit. The whole
    # text on purpose in the first: the value cut where the message cuts it, and nothing else said.
    Bad("timeout-ten-thousand-digits", {"timeoutSeconds": "1" * 10_000},
        f"timeoutSeconds = '{'1' * 76}... is out of range; {TIMEOUT}",
        (f"timeoutSeconds = '{'1' * 76}... is out of range", TIMEOUT)),
    row("override-number-ten-thousand-digits", {"maxtextOverrides": '{"steps": ' + "1" * 10_000 + "}"},
        f"""maxtextOverrides = '{{"steps": {'1' * 66}... has a number of more than 4300 digits""",
        "give numbers of a sensible size"),
    override("override-text-ten-thousand-digits", "steps", "1" * 10_000, f"'{'1' * 76}... is not an integer",
             typed("steps")),
    row("runtime-env-number-ten-thousand-digits", {"runtimeEnv": '{"env_vars": {"X": ' + "1" * 10_000 + "}}"},
        f"""runtimeEnv = '{{"env_vars": {{"X": {'1' * 57}... has a number of more than 4300 digits""",
        "give numbers of a sensible size"),
    row("unknown-setting", {"slices": 4}, f"{PROJECT}:slices is not a setting of this project",
        f"valid settings: {WORKLOAD_SETTINGS}"),
]  # fmt: skip


def test_the_table_covers_at_least_sixty_distinct_refusals():
    assert_distinct_cases(ROWS, at_least=60)


@pytest.mark.parametrize("bad", ROWS, ids=[bad.id for bad in ROWS])
def test_bad_settings_are_refused_before_anything_is_registered(bad: Bad):
    error, monitor = refused_by_workloads(bad)
    # The domain's error itself, whether the value came from the stack file or the infra stack,
    # with this one problem only.
    assert_refused(bad, error, monitor, bad.error or WorkloadSettingsError)
    assert len(error.problems) == 1, error.problems


def test_every_problem_of_the_stack_file_is_reported_at_once():
    bad = Bad(
        "many",
        {
            "preset": "tiny-cpu",
            "minSlices": 0,
            "maxFailures": -1,
            "timeoutSeconds": 0,
            "maxtextOverrides": {"steps": "abc", "learning_rate": 0, "lerning_rate": 1},
            "runtimeEnv": {"pip": ["torch"]},
            "runName": "run",
        },
        "",
        ("", "", ""),
        secrets=("runName",),
    )
    error, monitor = refused_by_workloads(bad)
    assert type(error) is WorkloadSettingsError
    said = [  # in the order the stack file's settings are checked
        {"setting": "runName", "fix": IN_CLEAR.format(key="runName"),
         "phrase": "is set as a secret, but it is exported as the runName output and names the checkpoint directory"},
        {"setting": "minSlices", "value": "0", "fix": MIN_SLICES, "phrase": "is out of range"},
        {"setting": "maxFailures", "value": "-1", "fix": MAX_FAILURES, "phrase": "is out of range"},
        {"setting": "timeoutSeconds", "value": "0", "fix": TIMEOUT, "phrase": "is out of range"},
        {"setting": "preset", "value": "'tiny-cpu'", "fix": f"choose a TPU preset: {TPU_PRESETS}",
         "phrase": "not on the infra stack's GKE TPU cluster"},
        {"setting": "maxtextOverrides", "value": "'lerning_rate'", "fix": "did you mean 'learning_rate'?",
         "phrase": "is not a MaxText setting"},
        {"setting": "maxtextOverrides.steps", "value": "'abc'", "fix": base("steps", "150001"),
         "phrase": "is not an integer"},
        {"setting": "maxtextOverrides.learning_rate", "value": "0", "fix": "use a number above 0",
         "phrase": "is out of range"},
        {"setting": "runtimeEnv.pip", "value": "['torch']", "fix": OPT_IN, "phrase": "installs Python packages"},
    ]  # fmt: skip
    assert len(error.problems) == len(said), error.problems
    for problem, parts in zip(error.problems, said, strict=True):
        assert_names(problem, **parts)
    assert not monitor.registrations


def test_a_secret_override_value_stays_out_of_the_message():
    bad = Bad("secret-overrides", {"maxtextOverrides": {"steps": "s3cr3t"}}, "", ("", "", ""),
              secrets=("maxtextOverrides",))  # fmt: skip
    error, _ = refused_by_workloads(bad)
    assert_one_problem(
        error.problems,
        setting="maxtextOverrides.steps",
        value="[secret]",
        fix=typed("steps"),
        phrase="is not an integer",
    )
    assert "s3cr3t" not in str(error)


# What the settings allow still runs.


@pytest.mark.parametrize(
    "settings",
    [
        {"runtimeEnv": {"pip": ["torch"]}, "allowRuntimeInstall": True},
        {"runtimeEnv": {"env_vars": {"XLA_FLAGS": "--xla_dump_to=/tmp"}}},
        {"runtimeEnv": {"working_dir": "."}},
        {"maxtextOverrides": {"enable_checkpointing": "False", "steps": "10_000", "learning_rate": "1e-4"}},
        {
            "maxtextOverrides": {
                "ici_fsdp_parallelism": -1,
                "per_device_batch_size": 0.5,
                "mlp_activations": ["silu", "linear"],
            }
        },
        {"maxtextOverrides": {"weight_sparsity_n": "2"}},  # null in base.yml: MaxText checks it
        {"elastic": True, "minSlices": 2, "maxFailures": 0, "timeoutSeconds": 1},
        {"queueTimeoutSeconds": 30},
        {"queueTimeoutSeconds": "604800"},
    ],
    ids=[
        "pip-opted-in",
        "env-vars",
        "local-working-dir",
        "typed-text",
        "typed-values",
        "null-default",
        "ranges-edges",
        "queue-timeout-lowest",
        "queue-timeout-highest",
    ],
)
def test_settings_within_range_register_the_job(settings):
    run, inputs = run_workloads("dev", **settings)
    assert len(run.of_type(RAY_JOB_GUARD)) == 1
    if "runtimeEnv" in settings:
        assert inputs["runtime_env"] == settings["runtimeEnv"]
    if "queueTimeoutSeconds" in settings:
        assert inputs["queue_timeout_seconds"] == int(settings["queueTimeoutSeconds"])


def test_a_cpu_preset_and_a_local_head_still_run_elastic():
    run, _ = run_workloads("local", elastic=True, minSlices=1)
    assert len(run.of_type(RAY_JOB)) == 1


# The shipped stacks register exactly what is recorded here, so that an unintended change of a job
# (which would be a new run from step 0) fails. Recorded values changed on purpose twice, both for
# issue 19 (a stack's job and checkpoints are its own, not those of same-named stacks of other
# projects or organizations):
# - the submission id names the organization, project and stack (`pulumi-<organization>-<project>-
#   <stack>-<digest>`; under mocks the organization is None, so it is left out), the RayJob gets
#   `project` (and `organization`, unset here) as inputs, and the guard gets the first releases'
#   form of the id as `previous_job_id` (so a guard they wrote is updated, not replaced);
# - the default run name is `<preset>-<stack>-<digest of organization, project and stack>`
#   (llama3-8b-dev-154078, was llama3-8b-dev), which changes the entrypoint, metadata and
#   checkpoint_dir, and so both ids. An existing stack that pins `runName: llama3-8b-dev` still
#   registers the first releases' job (tests/test_run_names.py).
# Issue 20 added the inputs queue_timeout_seconds and worker_group: they are updatable (a change is
# no new run), so the ids below stayed what they were.

DEV_GKE = {
    "ca_certificate": "Q0VSVA==",
    "endpoint": "203.0.113.10",
    "namespace": "training",
    "port": 8265,
    "service": "maxtext-tpu-cluster-head-svc",
}
DEV_RUN = "llama3-8b-dev-154078"
DEV_JOB = {
    "checkpoint_dir": f"/data/{DEV_RUN}",
    "entrypoint": 'python -m trainer.maxtext_multi_slice_trainer --job \'{"accelerator_type": "TPU-V6E", '
    '"checkpoint_root": "/data", "chips_per_host": 4, "elastic": false, "hosts_per_slice": 4, '
    '"max_failures": 0, "max_preemptions": -1, "maxtext_overrides": {"dataset_type": "synthetic", '
    '"dcn_data_parallelism": "2", '
    '"dcn_fsdp_parallelism": "1", "enable_autocheckpoint": "true", "ici_fsdp_parallelism": "16", '
    '"ici_tensor_parallelism": "1", '
    '"max_target_length": "4096", "model_name": "llama3-8b", "per_device_batch_size": "4", '
    '"remat_policy": "save_qkv_proj", "steps": "100"}, "min_slices": 2, "preset": "llama3-8b", '
    f'"resize_check_seconds": 60.0, "run_name": "{DEV_RUN}", '
    '"slices": 2, "topology": "4x4", "use_tpu": true}\'',
    "gke": DEV_GKE,
    "metadata": {"preset": "llama3-8b", "run_name": DEV_RUN},
    "project": PROJECT,
    "stack": "dev",
    "queue_timeout_seconds": 3600,
    "timeout_seconds": 21600,
    # What the worker group asks for: two slices of four TPU VMs, each worker all four chips of its VM.
    "worker_group": {"slices": 2, "min_slices": 2, "hosts_per_slice": 4, "resources_per_worker": {"TPU": 4}},
    "total_steps": 100,
    # Issue 35: what the stack predicts of the run, for its page and scalars (updatable, so the ids
    # stay): 100 steps of 8B on 32 chips at the assumed 40% MFU of 918 TFLOP/s, at $2.70 a chip-hour.
    "estimate": {
        "source": "assumedMfu",
        "step_seconds": 2.152817267517909,
        "band": "no fit check of this configuration: the step time assumes an MFU of 0.4, with no error band",
        "mfu": 0.4,
        "peak_tflops_per_chip": 918.0,
        "dollars_per_hour": 86.4,
        "job_dollars": 5.17,
    },
}
LOCAL_ROOT = str(PROJECT_ROOT / ".runs")
LOCAL_RUN = "tiny-cpu-local-abb21a"
LOCAL_JOB = {
    "address": "http://127.0.0.1:8265",
    "checkpoint_dir": f"{LOCAL_ROOT}/{LOCAL_RUN}",
    "entrypoint": 'python -m trainer.maxtext_multi_slice_trainer --job \'{"accelerator_type": null, '
    f'"checkpoint_root": "{LOCAL_ROOT}", "chips_per_host": 0, "elastic": false, "hosts_per_slice": 1, '
    '"max_failures": 0, "max_preemptions": -1, "maxtext_overrides": {"attention": "dot_product", '
    '"base_emb_dim": "64", '
    '"base_mlp_dim": "128", "base_num_decoder_layers": "2", "base_num_kv_heads": "4", '
    '"base_num_query_heads": "4", "checkpoint_period": "2", "dataset_type": "synthetic", '
    '"enable_autocheckpoint": "true", "enable_checkpointing": "true", "hardware": "cpu", "head_dim": "16", "max_target_length": '
    '"64", "model_name": "llama3-8b", "override_model_config": "true", "per_device_batch_size": "1", '
    '"skip_jax_distributed_system": "true", "steps": "6", "vocab_size": "256"}, "min_slices": 1, '
    f'"preset": "tiny-cpu", "resize_check_seconds": 60.0, "run_name": "{LOCAL_RUN}", "slices": 1, '
    '"topology": null, '
    '"use_tpu": false}\'',
    "metadata": {"preset": "tiny-cpu", "run_name": LOCAL_RUN},
    "project": PROJECT,
    "stack": "local",
    "queue_timeout_seconds": 3600,
    "timeout_seconds": 21600,
    "worker_group": {"slices": 1, "min_slices": 1, "hosts_per_slice": 1, "resources_per_worker": {"CPU": 1}},
    "total_steps": 6,
}


def registered(stack: str) -> list[tuple[str, str, dict[str, Any], frozenset[str], frozenset[str]]]:
    run, _ = run_workloads(stack)
    return [
        (
            r.type,
            r.name,
            {key: value for key, value in r.inputs.items() if key != "__provider"},
            r.secret_inputs - {"__provider"},
            frozenset(dependency.rsplit("::", 1)[-1] for dependency in r.dependencies),
        )
        for r in run.registrations
    ]


def test_the_dev_stack_registers_the_same_guard_and_job_as_before():
    # The job id is a digest of every job-defining input (see the note above DEV_GKE for why it changed).
    guard = {
        "gke": DEV_GKE,
        "job_id": "pulumi-maxtext-tpu-workloads-dev-63a8f90504d446cd",
        "previous_job_id": "pulumi-dev-106cdf7326c38a08",
    }
    assert registered("dev") == [
        (RAY_JOB_GUARD, "training-guard", guard, frozenset(), frozenset({INFRA_STACK})),
        (RAY_JOB, "training", DEV_JOB, frozenset(), frozenset({INFRA_STACK, "training-guard"})),
    ]  # fmt: skip


def test_the_local_stack_registers_the_same_guard_and_job_as_before():
    # Its checkpoint root is this checkout's, so its ids are computed (from the recorded job).
    guard = {
        "address": "http://127.0.0.1:8265",
        "job_id": submission_id(LOCAL_JOB),
        "previous_job_id": legacy_submission_id(LOCAL_JOB),
    }
    assert guard["job_id"].startswith(f"pulumi-{PROJECT}-local-")
    assert guard["previous_job_id"].startswith("pulumi-local-")
    assert registered("local") == [
        (RAY_JOB_GUARD, "training-guard", guard, frozenset(), frozenset()),
        (RAY_JOB, "training", LOCAL_JOB, frozenset(), frozenset({"training-guard"})),
    ]  # fmt: skip


# The real entry point: __main__.py run by the SDK's own runner (what `pulumi up` runs), under mocks.


class ExportRecordingMonitor(RecordingMonitor):
    def __init__(self, stack_outputs: dict[str, dict[str, Any]]):
        super().__init__(stack_outputs)
        self.exports: dict[str, Any] = {}

    def RegisterResourceOutputs(self, request):
        if "::pulumi:pulumi:Stack::" in request.urn:  # the root stack: its outputs are the exports
            self.exports.update(pulumi.runtime.rpc.deserialize_properties(request.outputs))
        return super().RegisterResourceOutputs(request)


def run_entry_point(stack: str, monitor: ExportRecordingMonitor, **settings: Any) -> None:
    """`pulumi.runtime.run_in_stack` is how the language host runs a program: it creates the
    root stack, runs __main__.py, then awaits the async program given to `pulumi.run`."""
    pulumi.runtime.set_mocks(monitor.mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    config = {**stack_config(stack, WORKLOADS_DIR), **{f"{PROJECT}:{key}": value for key, value in settings.items()}}
    pulumi.runtime.set_all_config(cli_engine_config(config, project=PROJECT, stack=stack), [])
    runtime_settings.set_root_resource(None)  # the runner makes its own root stack
    program = str(WORKLOADS_DIR / "__main__.py")
    try:
        asyncio.get_event_loop().run_until_complete(
            pulumi.runtime.run_in_stack(lambda: runpy.run_path(program, run_name="__main__"))
        )
    finally:
        pulumi.runtime.set_all_config({})


def test_the_entry_point_registers_the_job_and_exports_its_outputs():
    monitor = ExportRecordingMonitor({INFRA_STACK: INFRA_OUTPUTS})
    run_entry_point("dev", monitor)
    assert [r.type for r in monitor.registrations] == [RAY_JOB_GUARD, RAY_JOB]
    assert {r.type: {k: v for k, v in r.inputs.items() if k != "__provider"} for r in monitor.registrations}[
        RAY_JOB
    ] == DEV_JOB
    assert monitor.exports["runName"] == DEV_RUN and monitor.exports["checkpointDir"] == f"/data/{DEV_RUN}"


@pytest.mark.parametrize(
    "settings, error, problem",
    [
        ({"minSlices": 0}, WorkloadSettingsError, f"minSlices = 0 is out of range; {MIN_SLICES}"),
        (
            {"elastic": True, "minSlices": 3},
            JobError,
            "minSlices = 3 is out of range; use 1 to 2 (the slice count: the fewest slices an elastic job keeps "
            "training on)",
        ),
    ],
    ids=["from-the-stack-file", "from-the-infra-stack-outputs"],
)
def test_the_entry_point_raises_the_refusal_itself(settings, error, problem):
    # The whole text on purpose, one of each error type: what `pulumi up` prints is the domain's
    # heading and problem exactly, nothing of the SDK's around them.
    monitor = ExportRecordingMonitor({INFRA_STACK: INFRA_OUTPUTS})
    with pytest.raises(ProblemsError) as caught:
        run_entry_point("dev", monitor, **settings)
    assert type(caught.value) is error
    assert str(caught.value) == f"{error.heading}:\n  - {problem}"
    assert not monitor.registrations
