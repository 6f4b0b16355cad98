"""The dynamic-provider plugin as the engine runs it, and the property bags as the engine sends
them: shared by tests/test_ray_job_grpc.py and tests/test_ray_job_migration.py."""

from __future__ import annotations

import asyncio
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import struct_pb2
from pulumi.dynamic.dynamic import serialize_provider
from pulumi.runtime import rpc
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from domain.paths import PROJECT_ROOT
from workloads.ray_job import RayJobGuardProvider, RayJobProvider

URN = "urn:pulumi:grpc-test::maxtext-tpu-workloads::pulumi-python:dynamic/ray:RayJob::grpc-job"
TYPE = "pulumi-python:dynamic/ray:RayJob"
PROVIDER = serialize_provider(RayJobProvider())
GUARD_URN = "urn:pulumi:grpc-test::maxtext-tpu-workloads::pulumi-python:dynamic/ray:RayJobGuard::grpc-job-guard"
GUARD_TYPE = "pulumi-python:dynamic/ray:RayJobGuard"
GUARD_PROVIDER = serialize_provider(RayJobGuardProvider())
PLUGIN_START_SECONDS = 30


def to_struct(props: dict[str, Any]) -> struct_pb2.Struct:
    """Serializes a property bag as the engine receives it from the program (async in the SDK).
    On a loop of its own, not asyncio.run(), which leaves the thread without a current loop and
    so breaks the Pulumi mocks of every later test in this process."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(props, {}))
    finally:
        loop.close()


def from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    return rpc.deserialize_properties(struct)


def with_provider(props: dict[str, Any], provider: str = PROVIDER) -> dict[str, Any]:
    return {**props, "__provider": provider}


class Plugin:
    """The dynamic-provider plugin as the engine runs it: in the program's directory
    (workloads/, so `workloads.ray_job` must unpickle through the installed project, not the
    working directory), port read from its stdout, configured once with no config. Its stderr
    (which the engine shows as info lines) goes to a file; the process is stopped by its pid."""

    def __init__(self, stderr_path: Path):
        self.stderr_path = stderr_path
        with open(stderr_path, "ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-u", "-m", "pulumi.dynamic"],
                cwd=PROJECT_ROOT / "workloads",
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        self.channel = None
        try:
            ready, _, _ = select.select([self.process.stdout], [], [], PLUGIN_START_SECONDS)
            assert ready, f"the plugin printed no port within {PLUGIN_START_SECONDS} s:\n{stderr_path.read_text()}"
            port = int(self.process.stdout.readline())
            self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            grpc.channel_ready_future(self.channel).result(timeout=PLUGIN_START_SECONDS)
            self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)
            configured = self.stub.Configure(provider_pb2.ConfigureRequest(args=to_struct({})))
            assert not configured.acceptSecrets
        except BaseException:
            self.stop()
            raise

    def stop(self, kill: bool = False) -> None:
        if self.channel is not None:
            self.channel.close()
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process.stdout.close()


def running_plugin(tmp_path_factory) -> Iterator[tuple[provider_pb2_grpc.ResourceProviderStub, Path]]:
    """The body of a test module's `plugin` fixture: a plugin (its stub and its stderr file) for
    the module's tests, stopped after them."""
    started = Plugin(tmp_path_factory.mktemp("plugin") / "stderr.log")
    try:
        yield started.stub, started.stderr_path
    finally:
        started.stop()
