"""Scale from zero with Ray's own autoscaler, on this machine: what a stack that autoscales gets on
GKE (KubeRay's in-tree autoscaler, Ray autoscaler v2, a TPU worker group of 0 to `slices`
replicas and an idle timeout), with Ray's fake multi-node provider adding and removing the nodes
instead of GKE (LocalRayHead's worker_slices).

A training job of the tiny preset goes through the RayJob provider to a head that offers no CPU
and whose worker group has no node: it can only run once the autoscaler has added one. The test
watches the group through Ray's state API: 0 nodes before, one while the job runs (the one slice
the job asks for, of the two the group may have), the job SUCCEEDED, and 0 again once the node
has been idle for the idle timeout. It prints the scale-up time (the job's start to the node's,
both on Ray's clock) and the scale-down time (the job's end to the node's).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import ray
from ray.job_submission import JobSubmissionClient
from ray.util.state import list_nodes, list_placement_groups

from domain.training.job import resolve_job
from tests.support.processes import process_start
from tests.support.provider_run import ProviderRun
from workloads.local_ray import HEAD_NODE_TYPE, LocalRayError, LocalRayHead, WorkerSlices
from workloads.ray_job import record as ray_job_record
from workloads.ray_job import wait as job_wait
from workloads.ray_job.record import WorkerGroup

pytestmark = pytest.mark.timed  # reads the clock or waits on a deadline (tests/conftest.py)

IDLE_TIMEOUT_SECONDS = 5
MAX_SLICES = 2
# The job's queue deadline (queueTimeoutSeconds): far more than its scale-up and its worker group's
# start take here (~35 s in all on 2 cores).
QUEUE_TIMEOUT_SECONDS = 120
# Ray Train gives a worker group's placement 60 s in Ray 2.60 (RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S)
# before it tears the request down and retries: a scale-up must come well within that.
SCALE_UP_BOUND_SECONDS = 60
# After the idle timeout: the autoscaler's next look (every second here) and the node's teardown.
SCALE_DOWN_MARGIN_SECONDS = 15


def ray_schema() -> dict:
    """The cluster config schema Ray's autoscaler checks every config against."""
    with open(os.path.join(os.path.dirname(ray.__file__), "autoscaler", "ray-schema.json")) as schema:
        return json.load(schema)


# ------------------------------------------------------------------ the group's config
def test_the_autoscaling_config_is_what_ray_accepts_one_node_type_of_0_to_n_slices():
    config = WorkerSlices(max_slices=3, cpus_per_slice=2, idle_timeout_seconds=7.5).autoscaling_config(
        "127.0.0.1:41000"
    )
    jsonschema.validate(config, ray_schema())  # misspelt or unknown keys fail: Ray's schema forbids extras
    group = config["available_node_types"]["slice"]
    assert (group["min_workers"], group["max_workers"], config["max_workers"]) == (0, 3, 3)
    assert group["resources"] == {"CPU": 2, "slice": 1}
    # The head offers nothing a worker needs, and no more heads come.
    assert config["head_node_type"] == HEAD_NODE_TYPE
    assert config["available_node_types"][HEAD_NODE_TYPE] == {"resources": {}, "node_config": {}, "max_workers": 0}
    # In minutes, as KubeRay converts autoscalerOptions.idleTimeoutSeconds.
    assert config["idle_timeout_minutes"] * 60 == pytest.approx(7.5)
    assert config["provider"]["gcs_address"] == "127.0.0.1:41000"
    assert config["provider"]["disable_node_updaters"] is True


def test_the_provider_the_config_names_is_rays_fake_multi_node_provider():
    """The config names the provider by its class (see local_ray.slices.FAKE_PROVIDER): it must still be
    where Ray 2.60 has it, and be a node provider."""
    from importlib import import_module

    from ray.autoscaler.node_provider import NodeProvider

    provider = WorkerSlices().autoscaling_config("127.0.0.1:41000")["provider"]
    assert provider["type"] == "external"
    module, _, name = provider["module"].rpartition(".")
    assert issubclass(getattr(import_module(module), name), NodeProvider)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_slices", 0, "max_slices = 0 must be at least 1"),
        ("cpus_per_slice", 0, "cpus_per_slice = 0 must be at least 1"),
        ("idle_timeout_seconds", 0, "idle_timeout_seconds = 0 must be more than 0"),
        ("idle_timeout_seconds", float("nan"), "idle_timeout_seconds = nan must be more than 0"),
        ("node_type", "ray.head.default", "node_type = 'ray.head.default' is not valid"),
        ("node_type", "two words", "node_type = 'two words' is not valid"),
    ],
)
def test_a_group_that_cannot_work_is_refused_naming_the_field_and_value(field, value, message):
    with pytest.raises(LocalRayError, match=message.replace("(", r"\(").replace(".", r"\.")):
        WorkerSlices(**{field: value})


# ------------------------------------------------------------------ a real scale from zero
def node(head: LocalRayHead, node_id: str):
    """The node as the state API lists it, alive or dead."""
    [found] = list_nodes(
        address=head.address, filters=[("node_id", "=", node_id)], detail=True, raise_on_missing_output=False
    )
    return found


def environ_has(pid: int, entry: str) -> bool:
    try:
        return entry.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


@dataclass(frozen=True)
class Sample:
    """The cluster at one look: its placement groups as Ray had them between `before` and
    `after` (the machine's wall clock, which Ray's timestamps are on too), then its group's
    nodes."""

    before: float
    after: float
    placement_groups: dict[str, str]  # id: state
    slice_nodes: list[str]


def look(head: LocalRayHead) -> Sample:
    before = time.time()
    groups = list_placement_groups(address=head.address, raise_on_missing_output=False)
    after = time.time()
    return Sample(before, after, {group.placement_group_id: group.state for group in groups}, head.slice_nodes())


@pytest.mark.slow
def test_a_job_brings_its_slice_up_from_zero_succeeds_and_the_idle_slice_goes_back_to_zero(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(job_wait, "POLL_SECONDS", 0.5)
    job = resolve_job("tiny-cpu", run_name="autoscale-run", checkpoint_root=str(tmp_path))
    slices = WorkerSlices(max_slices=MAX_SLICES, idle_timeout_seconds=IDLE_TIMEOUT_SECONDS)
    began = time.monotonic()
    with LocalRayHead(worker_slices=slices) as head, head.client_environment():
        # The state API lists the head shortly after it answers.
        listed = time.monotonic()
        while not (heads := [entry for entry in list_nodes(address=head.address) if entry.is_head_node]):
            assert time.monotonic() - listed < 30, "the state API does not list the head"
            time.sleep(0.5)
        assert "CPU" not in heads[0].resources_total, "the head must not offer what the job's worker needs"
        assert head.slice_nodes() == [], "the group must start at 0"
        client = JobSubmissionClient(head.address)

        run = ProviderRun(head, job, timeout_seconds=300)
        # What the workloads stack adds for a job that may wait for its slices (job_inputs): the
        # queue deadline and what the worker group asks for. Neither changes the job's id.
        run.props.update(queue_timeout_seconds=QUEUE_TIMEOUT_SECONDS, worker_group=WorkerGroup.of(job).to_props())
        assert ray_job_record.submission_id(run.props) == run.job_id
        run.start()
        samples: list[Sample] = []
        node_processes: dict[int, int] = {}  # the added node's, once it is up
        status = None
        deadline = time.monotonic() + 300
        while status is None or not status.is_terminal():
            assert time.monotonic() < deadline, f"the job did not end:\n{run.log()[-3000:]}"
            samples.append(look(head))
            if samples[-1].slice_nodes and not node_processes:
                node_processes = {
                    pid: started
                    for pid, started in head._session_processes().items()
                    if environ_has(pid, f"RAY_NODE_TYPE_NAME={slices.node_type}")
                }
            try:
                status = client.get_job_status(run.job_id)
            except RuntimeError:  # not submitted yet
                pass
            time.sleep(0.5)
        run.join(timeout=60)
        assert run.error is None, run.error
        outs = run.outs
        assert outs is not None and outs["status"] == "SUCCEEDED", outs
        assert outs["steps_completed"] == job.total_steps
        info = client.get_job_info(run.job_id)
        # Then until the group is back at 0, or for longer than the idle timeout allows.
        while samples[-1].slice_nodes:
            assert time.time() - info.end_time / 1000 < IDLE_TIMEOUT_SECONDS + SCALE_DOWN_MARGIN_SECONDS, (
                "the idle node stayed"
            )
            time.sleep(0.5)
            samples.append(look(head))

        # One node came, for the one slice the job asked for (the group may have two); while the
        # job ran, and no sooner than its worker group's placement request.
        node_ids = {node_id for sample in samples for node_id in sample.slice_nodes}
        assert len(node_ids) == 1 and max(len(sample.slice_nodes) for sample in samples) == 1, samples
        [node_id] = node_ids
        [group_id] = {group for sample in samples for group in sample.placement_groups}
        [group] = list_placement_groups(
            address=head.address, filters=[("placement_group_id", "=", group_id)], detail=True
        )
        asked = int(group.stats["creation_request_received_ns"]) / 1e9  # int64, as text
        added = node(head, node_id)
        scale_up = added.start_time_ms / 1000 - info.start_time / 1000
        reaction = added.start_time_ms / 1000 - asked
        assert 0 < reaction < scale_up < SCALE_UP_BOUND_SECONDS, (reaction, scale_up)

        # Removed once idle for the idle timeout: the node is idle from the placement group's
        # removal (its bundle holds the node's CPU until then), seen at the first look after.
        removed = node(head, node_id)
        assert removed.state == "DEAD"
        # Removed after the look before that one began and before the first look that saw it ended.
        seen = next(index for index, sample in enumerate(samples) if sample.placement_groups.get(group_id) == "REMOVED")
        assert seen > 0, "the placement group was gone at the first look"
        looks = samples[seen].after - samples[seen - 1].before
        idle = removed.end_time_ms / 1000 - samples[seen].after  # at most `looks` short of the node's idle time
        assert IDLE_TIMEOUT_SECONDS - looks <= idle < IDLE_TIMEOUT_SECONDS + SCALE_DOWN_MARGIN_SECONDS, (idle, looks)
        scale_down = removed.end_time_ms / 1000 - info.end_time / 1000
        # The queue time the job reports covers the scale-up: its first worker group started on
        # the node the autoscaler added (the output is rounded to 0.1 s), before its first step.
        queued = outs["seconds_queued"]
        assert queued is not None and scale_up - 0.1 <= queued <= outs["seconds_to_first_step"], (queued, scale_up)
        progress = capsys.readouterr().err
        # While it waited, it said so: one slice asked, none up (the group at 0).
        assert f"RayJob {run.job_id}: waiting for slices: 1 asked, 0 up" in progress, progress
        # And the provider ended the node's processes.
        assert node_processes, "the node's processes were never seen"
        left = [pid for pid, started in node_processes.items() if process_start(pid) == started]
        assert left == [], f"the removed node's processes {left} still run"
    took = time.monotonic() - began
    with capsys.disabled():  # shown with -s
        print(
            f"\njob {(info.end_time - info.start_time) / 1000:.1f} s, secondsQueued {queued} s; scale-up: job start "
            f"-> node alive {scale_up:.1f} s (placement request -> node alive {reaction:.1f} s); scale-down: job end "
            f"-> node gone {scale_down:.1f} s, idle -> node gone {idle:.1f} s (idle timeout {IDLE_TIMEOUT_SECONDS} s, "
            f"removal seen within {looks:.1f} s); whole test {took:.0f} s"
        )
