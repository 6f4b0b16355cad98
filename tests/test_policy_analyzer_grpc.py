"""The pack as the Pulumi CLI runs it: `python -m pulumi.policy` serves the analyzer over gRPC,
and the engine calls GetAnalyzerInfo, Configure and Analyze."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from policies.check import resources_of, run_stack
from policies.rules import ALL
from tests.support.pulumi_harness import PROJECT_ROOT

pytestmark = pytest.mark.slow
BUCKET = "gcp:storage/bucket:Bucket"


@pytest.fixture(scope="module")
def analyzer():
    # The engine passes its own address for logs; nothing here logs, so any address will do.
    process = subprocess.Popen(
        [sys.executable, "-m", "pulumi.policy", "127.0.0.1:1", str(PROJECT_ROOT / "policies")],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    port = process.stdout.readline().decode().strip()
    assert port.isdigit(), process.stderr.read().decode()[-2000:]
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield analyzer_pb2_grpc.AnalyzerStub(channel)
    channel.close()
    process.send_signal(signal.SIGTERM)  # the analyzer this test started, by its pid
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def to_struct(properties: dict) -> struct_pb2.Struct:
    return asyncio.run(rpc.serialize_properties(properties, {}))


def analyze(stub, resource: dict) -> list:
    request = analyzer_pb2.AnalyzeRequest(
        type=resource["type"],
        name=resource["name"],
        urn=resource["urn"],
        properties=to_struct(resource["props"]),
    )
    return list(stub.Analyze(request).diagnostics)


@pytest.fixture(scope="module")
def bucket():
    [found] = [r for r in resources_of(run_stack("infra", "dev")) if r["type"] == BUCKET]
    return found


def test_analyzer_info_lists_every_policy(analyzer):
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "maxtext-tpu-policies"
    assert {policy.name for policy in info.policies} == {policy.name for policy in ALL}
    assert all(policy.description for policy in info.policies)


def test_a_shipped_bucket_passes_and_a_public_one_is_refused(analyzer, bucket):
    assert analyze(analyzer, bucket) == []
    public = {**bucket, "props": {**bucket["props"], "publicAccessPrevention": "inherited"}}
    diagnostics = analyze(analyzer, public)
    assert diagnostics, "a bucket open to public access must be reported"
    assert all(d.urn == bucket["urn"] for d in diagnostics)
    assert any(d.enforcementLevel == analyzer_pb2.MANDATORY for d in diagnostics)


def test_configure_downgrades_a_policy(analyzer, bucket):
    public = {**bucket, "props": {**bucket["props"], "publicAccessPrevention": "inherited"}}
    names = {d.policyName for d in analyze(analyzer, public)}
    analyzer.Configure(
        analyzer_pb2.ConfigureAnalyzerRequest(
            policyConfig={name: analyzer_pb2.PolicyConfig(enforcementLevel=analyzer_pb2.ADVISORY) for name in names}
        )
    )
    try:
        diagnostics = analyze(analyzer, public)
        assert diagnostics and all(d.enforcementLevel == analyzer_pb2.ADVISORY for d in diagnostics)
    finally:
        analyzer.Configure(
            analyzer_pb2.ConfigureAnalyzerRequest(
                policyConfig={
                    name: analyzer_pb2.PolicyConfig(enforcementLevel=analyzer_pb2.MANDATORY) for name in names
                }
            )
        )
