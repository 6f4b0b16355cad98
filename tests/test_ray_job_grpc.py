"""RayJobProvider driven the way the Pulumi engine drives it, without the CLI.

The engine never calls the provider's Python methods: it starts the dynamic-provider plugin
(`python -m pulumi.dynamic`), reads the gRPC port it prints, and speaks
`pulumirpc.ResourceProvider` to it, with every property bag a protobuf Struct and the pickled
provider travelling as the `__provider` input. Mocks and direct method calls skip all of that:
the unpickling in a fresh process, the int → float round trip of numbers, the dropping of None
values, the Diff and Read encodings. This test goes through it against a real local Ray head.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dill
import grpc
import pytest
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from tests.support.provider_plugin import (
    GUARD_PROVIDER,
    GUARD_TYPE,
    GUARD_URN,
    PROVIDER,
    TYPE,
    URN,
    Plugin,
    from_struct,
    running_plugin,
    to_struct,
    with_provider,
)
from workloads.ray_job import RayJobProvider
from workloads.ray_job.record import submission_id

pytestmark = pytest.mark.slow

# One MaxText-style step line: the job ends within seconds and still has metrics to parse.
STEP_ENTRYPOINT = (
    "python -c \"print('completed step: 0, seconds: 0.1, TFLOP/s/device: 1.0, "
    "Tokens/s/device: 100.0, total_weights: 64, loss: 2.5')\""
)


def job_inputs(address: str, **changes: Any) -> dict[str, Any]:
    """What `RayJob(...)` registers (its None-valued output placeholders are dropped on the wire)."""
    return {
        "stack": "grpc-test",
        "entrypoint": STEP_ENTRYPOINT,
        "address": address,
        "timeout_seconds": 120,
        "total_steps": 1,
        **changes,
    }


def check(stub, news: dict[str, Any]) -> provider_pb2.CheckResponse:
    return stub.Check(
        provider_pb2.CheckRequest(
            urn=URN,
            name="grpc-job",
            type=TYPE,
            olds=to_struct({}),
            news=to_struct(with_provider(news)),
        )
    )


@pytest.fixture(scope="module")
def plugin(tmp_path_factory, local_ray_head) -> Iterator[tuple[provider_pb2_grpc.ResourceProviderStub, Path]]:
    """A plugin started after the local head, so it inherits the head's token location."""
    yield from running_plugin(tmp_path_factory)


def test_provider_is_pickled_by_reference():
    """By reference, state holds a module path and a class name, not the code: upgrading
    workloads/ray_job/__init__.py takes effect in existing stacks."""
    pickled = base64.b64decode(PROVIDER)
    assert b"workloads.ray_job" in pickled and b"RayJobProvider" in pickled
    assert len(pickled) < 300


def test_check_reports_an_empty_entrypoint(plugin, local_ray_head):
    stub, _ = plugin
    response = check(stub, job_inputs(local_ray_head.address, entrypoint="  "))
    assert [failure.property for failure in response.failures] == ["entrypoint"]


def test_lifecycle_through_the_plugin(plugin, local_ray_head):
    stub, stderr_path = plugin
    inputs = job_inputs(local_ray_head.address)

    checked = check(stub, inputs)
    assert list(checked.failures) == []
    assert from_struct(checked.inputs) == with_provider(inputs)
    checked_inputs = checked.inputs

    created = stub.Create(
        provider_pb2.CreateRequest(
            urn=URN,
            name="grpc-job",
            type=TYPE,
            properties=checked_inputs,
            timeout=300,
        )
    )
    job_id, outputs = created.id, from_struct(created.properties)
    assert job_id.startswith("pulumi-grpc-test-")
    # The plugin sees the inputs after the wire's round trip; the id must still be the one a
    # resumed `pulumi up` derives, or an interrupted run would be submitted twice.
    assert job_id == submission_id(inputs)
    assert outputs["status"] == "SUCCEEDED", outputs.get("message")
    assert outputs["submission_id"] == job_id
    assert outputs["steps_completed"] == 1
    # Every number crosses the wire as a double: an int input reaches the provider as a float.
    assert isinstance(outputs["steps_completed"], float) and isinstance(outputs["timeout_seconds"], float)
    assert outputs["final_loss"] == 2.5
    assert outputs["__provider"] == PROVIDER
    assert f"RayJob {job_id}: SUCCEEDED" in stderr_path.read_text()

    def read() -> provider_pb2.ReadResponse:
        return stub.Read(
            provider_pb2.ReadRequest(
                id=job_id,
                urn=URN,
                name="grpc-job",
                type=TYPE,
                properties=created.properties,
                inputs=checked_inputs,
            )
        )

    read_back = read()
    assert read_back.id == job_id
    assert from_struct(read_back.properties)["status"] == "SUCCEEDED"

    def diff(news: dict[str, Any]) -> provider_pb2.DiffResponse:
        return stub.Diff(
            provider_pb2.DiffRequest(
                id=job_id,
                urn=URN,
                name="grpc-job",
                type=TYPE,
                olds=created.properties,
                old_inputs=checked_inputs,
                news=to_struct(news),
            )
        )

    changed = diff(with_provider(job_inputs(local_ray_head.address, entrypoint="python -c 'print(1)'")))
    assert changed.changes == provider_pb2.DiffResponse.DIFF_SOME
    assert "entrypoint" in changed.replaces

    # Another valid pickle of the same class stands for a new version of the provider's code.
    other_provider = base64.b64encode(dill.dumps(RayJobProvider(), protocol=2)).decode()
    assert other_provider != PROVIDER
    new_code = diff(with_provider(inputs, other_provider))
    assert new_code.changes == provider_pb2.DiffResponse.DIFF_NONE
    assert list(new_code.replaces) == []

    stub.Delete(
        provider_pb2.DeleteRequest(
            id=job_id,
            urn=URN,
            name="grpc-job",
            type=TYPE,
            properties=created.properties,
            old_inputs=checked_inputs,
        )
    )
    assert read().id == ""


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_an_interrupted_create_is_stopped_by_destroy(local_ray_head, tmp_path):
    """`pulumi up` killed after the submission (SIGKILL of the engine takes its plugin with it):
    the job resource never reached the state, the guard did; destroying the guard, from a new
    plugin as a later `pulumi destroy` would, stops the job and its processes."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    pidfile = tmp_path / "job.pid"
    inputs = job_inputs(
        local_ray_head.address,
        entrypoint=f"sh -c 'echo $$ > {pidfile}; exec sleep 300'",
        metadata={"test": str(time.monotonic_ns())},
    )
    job_id = submission_id(inputs)
    ray = JobSubmissionClient(local_ray_head.address, headers=local_ray_head.auth_headers)

    first = Plugin(tmp_path / "first.log")
    guard_inputs = to_struct(with_provider({"job_id": job_id, "address": local_ray_head.address}, GUARD_PROVIDER))
    guard = first.stub.Create(
        provider_pb2.CreateRequest(
            urn=GUARD_URN,
            name="grpc-job-guard",
            type=GUARD_TYPE,
            properties=guard_inputs,
            timeout=60,
        )
    )
    in_flight = first.stub.Create.future(
        provider_pb2.CreateRequest(
            urn=URN,
            name="grpc-job",
            type=TYPE,
            properties=to_struct(with_provider(inputs)),
            timeout=600,
        )
    )
    deadline = time.monotonic() + 90
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.2)
    pid = int(pidfile.read_text())
    first.stop(kill=True)
    with pytest.raises(grpc.RpcError):
        in_flight.result(timeout=30)
    time.sleep(2)
    assert ray.get_job_status(job_id) == JobStatus.RUNNING and pid_alive(pid)  # nothing stopped it

    second = Plugin(tmp_path / "second.log")
    try:
        second.stub.Delete(
            provider_pb2.DeleteRequest(
                id=guard.id,
                urn=GUARD_URN,
                name="grpc-job-guard",
                type=GUARD_TYPE,
                properties=guard.properties,
            )
        )
    finally:
        second.stop()
    assert ray.get_job_status(job_id) == JobStatus.STOPPED
    deadline = time.monotonic() + 15
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"the job's process {pid} outlived the stop"
        time.sleep(0.2)


def test_a_secret_env_var_stays_out_of_outputs_and_log_lines(plugin, local_ray_head):
    """The engine strips the secret marker before a provider that does not accept secrets (this
    one): so the provider must not copy such inputs into its outputs at all."""
    stub, stderr_path = plugin
    secret = f"wandb-{time.monotonic_ns()}"
    inputs = job_inputs(local_ray_head.address, runtime_env={"env_vars": {"WANDB_API_KEY": secret}})
    created = stub.Create(
        provider_pb2.CreateRequest(
            urn=URN,
            name="grpc-job",
            type=TYPE,
            properties=to_struct(with_provider(inputs)),
            timeout=300,
        )
    )
    outputs = from_struct(created.properties)
    assert outputs["status"] == "SUCCEEDED"
    assert secret not in created.properties.SerializeToString().decode("utf-8", "replace")
    assert secret not in stderr_path.read_text()
