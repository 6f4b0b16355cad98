"""A value is the whole value, valid values are accepted, and a refused value fails no other check.

Every string setting of both projects (listed from the settings classes themselves) is refused,
naming the setting, when its valid value carries a trailing line break (what
`printf 'x\\n' | pulumi config set KEY` stores, and what a check written with `$` lets through).
And values the authorities accept (an RFC 6598 DCN range, a dotted Kubernetes service account,
a namespace starting with a digit, a digest-only image) are accepted.
"""

from __future__ import annotations

import pytest

from domain.config import settings as infra_parser
from domain.config import workload_settings as workloads_parser
from domain.config.raw_config import read
from domain.config.settings import SettingsError
from domain.config.workload_settings import WorkloadSettingsError
from domain.setting import settings_of
from domain.stack_settings import StackSettings
from domain.workload_settings import WorkloadSettings
from tests.support.cli_settings import infra_settings, workload_settings

INFRA_BASE = {"gcp:project": "my-gcp-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"}
WORKLOADS_BASE = {"infraStack": "organization/maxtext-tpu-infra/dev"}
# A valid value for each string setting whose default is not one (required or unset by default).
SAMPLES = {
    "gcp:project": "my-gcp-project",
    "gcp:region": "us-east5",
    "gcp:zone": "us-east5-b",
    "topology": "4x4",
    "reservation": "v6e-res",
    "bucketName": "my-ckpt",
    "datasetBucket": "acme-corpus",
    "datasetPrefix": "corpora/web-v1",
    "rayImage": "us-docker.pkg.dev/my-project/images/maxtext-ray:2.60.0-1",
    "imageCacheDisk": "global/images/maxtext-ray-2-60-0-1",
    "infraStack": "organization/maxtext-tpu-infra/dev",
    "address": "http://127.0.0.1:8265",
    "preset": "llama3-8b",
    "runName": "run-1",
    "fitCheckResult": "fit.json",
    "datasetFiles": "c4/data-*-of-00008.array_record",
    "evalFiles": "c4/eval-*.parquet",
    "huggingFaceDataset": "allenai/c4",
}
# What a sample needs beside it to be valid.
CONTEXT = {"reservation": {"capacity": "reservation"}, "datasetPrefix": {"datasetBucket": "acme-corpus"}}


def _string_settings(cls: type) -> list[tuple[str, str]]:
    """(key, a valid value) for every string setting `cls` declares."""
    cases = []
    for entry in settings_of(cls):
        if entry.kind != "string":
            continue
        value = SAMPLES.get(entry.key, entry.default if isinstance(entry.default, str) else None)
        assert value is not None, f"add a valid sample value for {entry.key} to SAMPLES"
        cases.append((entry.key, value))
    return cases


INFRA_STRINGS = _string_settings(StackSettings)
WORKLOADS_STRINGS = _string_settings(WorkloadSettings)


def test_the_walk_covers_every_string_setting():
    assert [key for key, _ in INFRA_STRINGS] == [
        "gcp:project",
        "gcp:region",
        "gcp:zone",
        "preset",
        "mode",
        "clusterName",
        "gkeVersion",
        "releaseChannel",
        "network",
        "topology",
        "reservation",
        "namespace",
        "serviceAccount",
        "bucketName",
        "datasetBucket",
        "datasetPrefix",
        "rayImage",
        "imageCacheDisk",
        "headMachineType",
    ]
    assert [key for key, _ in WORKLOADS_STRINGS] == [
        "infraStack",
        "address",
        "preset",
        "runName",
        "checkpointRoot",
        "datasetFiles",
        "evalFiles",
        "tokenizer",
        "huggingFaceDataset",
        "fitCheckResult",
    ]


@pytest.mark.parametrize("key, value", INFRA_STRINGS, ids=[key for key, _ in INFRA_STRINGS])
def test_an_infra_value_with_a_trailing_line_break_is_refused(key, value):
    base = {**INFRA_BASE, **CONTEXT.get(key, {})}
    infra_settings({**base, key: value})  # valid as it is
    with pytest.raises(SettingsError) as caught:
        infra_settings({**base, key: value + "\n"})
    assert any(problem.startswith(f"{key} = {value + chr(10)!r} ") for problem in caught.value.problems), (
        caught.value.problems
    )


@pytest.mark.parametrize("key, value", WORKLOADS_STRINGS, ids=[key for key, _ in WORKLOADS_STRINGS])
def test_a_workloads_value_with_a_trailing_line_break_is_refused(key, value):
    base = {"address": "http://127.0.0.1:8265", "preset": "tiny-cpu"} if key == "address" else WORKLOADS_BASE
    if key == "fitCheckResult":  # only used with an infra stack
        base = WORKLOADS_BASE
    with pytest.raises(WorkloadSettingsError) as caught:
        workload_settings({**base, key: value + "\n"})
    assert any(problem.startswith(f"{key} = {value + chr(10)!r} ") for problem in caught.value.problems), (
        caught.value.problems
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"dcnSubnets": '["100.64.0.0/16", "100.65.0.0/16"]'},  # RFC 6598
        {"dcnSubnets": '["198.18.0.0/16", "192.168.0.0/24"]'},  # RFC 2544, RFC 1918
        {"dcnSubnets": '["10.50.0.0/28", "10.60.0.0/28"]'},  # 12 usable addresses for 8 VMs
        {"serviceAccount": "ray.trainer.v1"},  # a DNS subdomain name
        {"serviceAccount": "r" * 63 + "." + "s" * 63},
        {"namespace": "2024-runs"},  # an RFC 1123 label may start with a digit
        {"rayImage": "us-docker.pkg.dev/p/r/maxtext-ray@sha256:" + "0123456789abcdef" * 4},
        {"rayImage": "us-docker.pkg.dev/p/r/maxtext-ray:1.0.0"},  # a team's own numbering of its build
        {"headMachineType": "n1-standard-16"},
        {"headMachineType": "a2-highgpu-1g"},  # vCPUs not in the name: not checked
        {"bucketName": "ckpt.example.com"},
        {"mode": "autopilot", "headMachineType": "n1-standard-16"},  # the default does nothing wrong
        {"mode": "autopilot", "dcnSubnets": '["10.50.0.0/16", "10.60.0.0/16"]'},
        {"gcp:region": "europe-west4", "gcp:zone": "europe-west4-a", "dcnSubnets": '["10.202.0.0/16", "10.60.0.0/16"]'},
    ],
)
def test_valid_values_are_accepted(overrides):
    infra_settings({**INFRA_BASE, **overrides})


@pytest.mark.parametrize(
    "overrides",
    [
        {"minSlices": "1"},  # the default does nothing wrong
        {"elastic": "true", "minSlices": "2"},
        {"checkpointRoot": ".runs"},
        {
            "runtimeEnv": '{"env_vars": {"LIBTPU_INIT_ARGS": "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=false"}}'
        },
        {"runtimeEnv": '{"pip": ["x"]}', "allowRuntimeInstall": "true"},
    ],
)
def test_valid_workloads_values_are_accepted(overrides):
    workload_settings({**WORKLOADS_BASE, **overrides})


# Stacks whose checks of several settings take different branches.
CROSS_CHECKED = [
    ("infra-standard", {**INFRA_BASE}),
    ("infra-autopilot-spot", {**INFRA_BASE, "mode": "autopilot", "capacity": '["spot"]'}),
    ("infra-scaling-with-data", {**INFRA_BASE, "minSlices": "0", "datasetBucket": "acme-corpus"}),
    (
        "infra-production",
        {**INFRA_BASE, "production": "true", "deletionProtection": "true", "bucketForceDestroy": "false"},
    ),
    ("workloads-infra", {**WORKLOADS_BASE}),
    (
        "workloads-elastic-data",
        {**WORKLOADS_BASE, "elastic": "true", "minSlices": "1", "datasetFiles": SAMPLES["datasetFiles"]},
    ),
    ("workloads-local", {"address": SAMPLES["address"], "preset": "tiny-cpu", "checkpointRoot": ".runs"}),
]


@pytest.mark.parametrize(("stack", "raw"), CROSS_CHECKED, ids=[stack for stack, _ in CROSS_CHECKED])
def test_a_refused_setting_is_none_to_every_check_of_several_and_fails_none_of_them(stack, raw, monkeypatch):
    """The checks of several settings read the settings class with a refused value None, whatever
    its declared type (domain/setting.py, `Reading.partial`): with any one setting refused, the
    stack is refused with that problem, never by a TypeError or AttributeError from a check that
    read the None as a value."""
    parser, cls, error, parse = (
        (infra_parser, StackSettings, SettingsError, infra_settings)
        if stack.startswith("infra")
        else (workloads_parser, WorkloadSettings, WorkloadSettingsError, workload_settings)
    )
    parse(raw)  # valid as it is
    for declared in settings_of(cls):

        def read_refusing(*args, refused=declared.field, **kwargs):
            reading = read(*args, **kwargs)
            reading.refused.add(refused)  # as `read` records a value it refuses
            reading.problems.append(f"{refused} refused for the test")
            return reading

        monkeypatch.setattr(parser, "read", read_refusing)
        with pytest.raises(error) as caught:
            parse(raw)
        assert f"{declared.field} refused for the test" in caught.value.problems
