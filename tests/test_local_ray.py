"""LocalRayHead on a real Ray head: token authentication on the Jobs API, the token kept out of
command lines and logs, jobs that still run under it, and a stop() that is bounded and leaves
no process of the head's session behind, a running job's included."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from tests.support.listeners import listeners, not_on_loopback
from tests.support.port_holder import PortHolder
from tests.support.processes import process_start
from workloads import local_ray
from workloads.local_ray import (
    AUTOSCALER_METRIC_PORT_ENV,
    STOP_BOUND_SECONDS,
    LocalRayError,
    LocalRayHead,
    WorkerSlices,
    dashboard_answers,
)

pytestmark = pytest.mark.slow

# What the brief for stop() asks: the head is gone well within this, a running job or not.
STOP_TARGET_SECONDS = 15
assert STOP_BOUND_SECONDS < STOP_TARGET_SECONDS


@pytest.fixture
def head():
    """A head of the test's own, for the tests that stop it."""
    with LocalRayHead() as started:
        yield started


def status_of(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def group_members(group_id: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            data = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if int(fields[2]) == group_id and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout} s"
        time.sleep(0.2)


def submit(client: JobSubmissionClient, **job: Any) -> str:
    """Submits once, never retried: start() returns only once the head's job agent listens, so
    a started head takes a job at once (no "No available agent")."""
    return client.submit_job(**job)


def start_sleeping_job(head: LocalRayHead, pid_file: Path) -> tuple[int, int]:
    """A job whose entrypoint writes its pid and then sleeps; returns (pid, start time) once
    the job is RUNNING."""
    client = JobSubmissionClient(head.address, headers=head.auth_headers)
    job_id = submit(client, entrypoint=f"sh -c 'echo $$ > {pid_file}; exec sleep 300'")
    wait_until(lambda: client.get_job_status(job_id) == JobStatus.RUNNING, 60, "the job RUNNING")
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, "the job's pid file")
    pid = int(pid_file.read_text())
    started = process_start(pid)
    assert started is not None, "the job's entrypoint is not running"
    return pid, started


def test_the_jobs_api_wants_the_token(head):
    jobs = f"{head.address}/api/jobs/"
    assert status_of(jobs) == 401
    assert status_of(jobs, {"Authorization": "Bearer " + "0" * 64}) == 403
    assert status_of(jobs, head.auth_headers) == 200
    assert status_of(jobs, {"X-Ray-Authorization": head.auth_headers["Authorization"]}) == 200
    # /api/version is not among the paths Ray lets through without a token.
    assert status_of(f"{head.address}/api/version") == 401
    assert not dashboard_answers(head.address)
    assert dashboard_answers(head.address, headers=head.auth_headers)

    started = time.monotonic()
    head.stop()
    assert time.monotonic() - started < STOP_BOUND_SECONDS
    assert not head.token_path.exists(), "the token outlived its head"


def test_the_token_file_is_private_and_the_token_stays_out_of_command_lines_and_logs(local_ray_head):
    head = local_ray_head  # the session's (tests/conftest.py): this test leaves it running
    token = head.auth_headers["Authorization"].removeprefix("Bearer ").encode()
    assert head.token_path.read_bytes() == token
    assert stat.S_IMODE(head.token_path.stat().st_mode) == 0o600
    # Its directory stays private too, though `ray start` opens the temp dir to everyone.
    assert stat.S_IMODE(head.token_path.parent.stat().st_mode) == 0o700
    assert head.token_path.parent.parent == Path(head.temp_dir)
    # Some authenticated traffic first, so that anything logging requests has had its chance.
    client = JobSubmissionClient(head.address, headers=head.auth_headers)
    job_id = submit(client, entrypoint="echo hello")
    wait_until(lambda: client.get_job_status(job_id).is_terminal(), 60, "the job's end")

    assert token not in Path(f"/proc/{head.process.pid}/cmdline").read_bytes()
    for pid in head._session_processes():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue  # ended meanwhile
        assert token not in cmdline, f"the token is in the command line of {pid}"
        assert token not in environ, f"the token is in the environment of {pid}"
    # What the session got instead: the file's path. (Only `ray start`'s environment is checked:
    # Ray's workers retitle themselves with setproctitle, which may overwrite that memory.)
    ray_start_environ = Path(f"/proc/{head.process.pid}/environ").read_bytes().split(b"\0")
    assert f"RAY_AUTH_TOKEN_PATH={head.token_path}".encode() in ray_start_environ
    assert token not in head.log_path.read_bytes()
    for path in Path(head.temp_dir).rglob("*"):
        if path.is_file() and not path.is_symlink() and path != head.token_path:
            assert token not in path.read_bytes(), f"the token is in {path}"


def test_a_jobs_driver_connects_under_token_auth(local_ray_head):
    head = local_ray_head  # the session's (tests/conftest.py): this test leaves it running
    client = JobSubmissionClient(head.address, headers=head.auth_headers)
    job_id = client.submit_job(
        entrypoint="python -c \"import ray; ray.init(); print('resources', ray.cluster_resources())\""
    )
    wait_until(lambda: client.get_job_status(job_id).is_terminal(), 120, "the job's end")
    logs = client.get_job_logs(job_id)
    assert client.get_job_status(job_id) == JobStatus.SUCCEEDED, logs[-3000:]
    assert "resources {" in logs and "'CPU'" in logs


def test_clients_find_the_token_through_client_env(local_ray_head):
    head = local_ray_head  # the session's (tests/conftest.py): this test leaves it running
    """What the Pulumi dynamic provider gets: the file's path and the mode, never the token."""
    assert set(head.client_env) == {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"}
    assert head.client_env["RAY_AUTH_TOKEN_PATH"] == str(head.token_path)
    listing = (
        f"from ray.job_submission import JobSubmissionClient; print(JobSubmissionClient({head.address!r}).list_jobs())"
    )
    clean = {name: value for name, value in os.environ.items() if not name.startswith("RAY_AUTH")}

    def run(env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", listing], env=env, capture_output=True, text=True, timeout=60)

    assert run({**clean, **head.client_env}).returncode == 0
    # The path alone is not enough: Ray's clients send a token only under RAY_AUTH_MODE=token.
    without_mode = run({**clean, "RAY_AUTH_TOKEN_PATH": str(head.token_path)})
    assert without_mode.returncode != 0 and "Missing authentication token" in without_mode.stderr

    with head.client_environment():
        assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(head.token_path)
        # Answered (a refused token raises): what jobs other tests left on the head does not matter.
        assert isinstance(JobSubmissionClient(head.address).list_jobs(), list)


def test_stop_is_bounded_and_ends_a_running_jobs_processes(head, tmp_path):
    job_pid, job_started = start_sleeping_job(head, tmp_path / "job.pid")
    group = head.process.pid
    assert os.getpgid(job_pid) != group, "Ray should start the entrypoint in a session of its own"
    session = head._session_processes()
    assert job_pid in session

    started = time.monotonic()
    head.stop()
    elapsed = time.monotonic() - started
    print(f"stop() with a running job took {elapsed:.2f} s")
    assert elapsed < STOP_BOUND_SECONDS
    assert process_start(job_pid) != job_started, f"the job's process {job_pid} outlived stop()"
    assert head.process.returncode is not None
    assert group_members(group) == []
    assert [pid for pid, start in session.items() if process_start(pid) == start] == []


def test_stop_is_bounded_even_when_ray_start_ignores_sigterm(head, tmp_path):
    """ray start cannot clean up after itself here: stop() has to find and kill the session's
    processes, the job's in its own session included, on its own."""
    job_pid, job_started = start_sleeping_job(head, tmp_path / "job.pid")
    group = head.process.pid
    session = head._session_processes()
    os.kill(head.process.pid, signal.SIGSTOP)  # the `ray start` this test started

    started = time.monotonic()
    head.stop()
    elapsed = time.monotonic() - started
    print(f"stop() with a stopped `ray start` and a running job took {elapsed:.2f} s")
    assert elapsed < STOP_BOUND_SECONDS
    assert process_start(job_pid) != job_started, f"the job's process {job_pid} outlived stop()"
    assert group_members(group) == []
    assert [pid for pid, start in session.items() if process_start(pid) == start] == []


# ------------------------------------------------------------------ a port that is taken
# Each holder is a process of its own on a real port of 127.0.0.1; the head must fail within
# seconds (not wait start_timeout for a dashboard that cannot come up), naming the port and the
# holder's pid.
FAIL_FAST_SECONDS = 10


@pytest.mark.parametrize("mode", ["silent", "404"])
@pytest.mark.parametrize("which", ["dashboard", "GCS"])
def test_a_taken_port_fails_at_once_naming_the_port_and_its_holder(which, mode):
    with PortHolder(mode) as holder:
        port = {"dashboard_port" if which == "dashboard" else "gcs_port": holder.port}
        head = LocalRayHead(**port)
        started = time.monotonic()
        with pytest.raises(LocalRayError) as error:
            head.start()
        assert time.monotonic() - started < FAIL_FAST_SECONDS
    message = str(error.value)
    assert f"{which} port 127.0.0.1:{holder.port}" in message
    assert f"pid {holder.pid} (" in message and "port_holder" not in message
    assert head.process is None, "ray start was launched on a taken port"


def test_a_dashboard_port_taken_after_the_check_fails_fast_from_rays_own_log(monkeypatch):
    """The port is taken between the check and `ray start` (or the check cannot see it): Ray
    says so in its log and goes on without a dashboard; start() must not wait start_timeout."""
    monkeypatch.setattr(local_ray.head, "port_in_use", lambda port, host="127.0.0.1": False)
    with PortHolder("silent") as holder:
        head = LocalRayHead(dashboard_port=holder.port, start_timeout=120)
        started = time.monotonic()
        with pytest.raises(LocalRayError) as error:
            head.start()
        elapsed = time.monotonic() - started
    message = str(error.value)
    assert elapsed < 30, f"took {elapsed:.0f} s"
    assert f"127.0.0.1:{holder.port} is taken by pid {holder.pid} (" in message
    assert not local_ray.processes.group_alive(head.process.pid), "the failed head was left running"


def _first_choice_includes(monkeypatch, port: int, times: int = 1) -> None:
    """The first `times` choices of ports for `ray start`'s options begin with `port`: a port
    another process takes between the choice and Ray's bind (CI saw the job agent's taken)."""
    choose = local_ray.ray_start.free_ports
    left = [times]

    def chosen(count, avoid=frozenset()):
        if left[0] == 0:
            return choose(count, avoid)
        left[0] -= 1
        return [port, *choose(count - 1, avoid=set(avoid) | {port})]

    monkeypatch.setattr(local_ray.ray_start, "free_ports", chosen)


def test_a_port_taken_before_ray_binds_it_is_chosen_again_and_the_head_takes_a_job_at_once(monkeypatch, tmp_path):
    """The first choice gives the job agent a port another process holds: Ray would start
    without its job agent, and every job would get "No available agent". start() sees the
    port held outside its session, ends that attempt and starts again on fresh ports."""
    with PortHolder("silent") as holder:
        _first_choice_includes(monkeypatch, holder.port)
        with LocalRayHead() as head:
            start_sleeping_job(head, tmp_path / "job.pid")
            [retry] = head.port_retries
            assert f"dashboard-agent-listen-port 127.0.0.1:{holder.port} is taken by pid {holder.pid} (" in retry
            assert holder.port not in head.ports.values()


def test_ports_taken_at_every_choice_fail_the_start_naming_them_and_leave_no_process(monkeypatch):
    with PortHolder("silent") as holder:
        _first_choice_includes(monkeypatch, holder.port, times=local_ray.ray_start.PORT_ATTEMPTS)
        head = LocalRayHead()
        started = time.monotonic()
        with pytest.raises(LocalRayError) as error:
            head.start()
        elapsed = time.monotonic() - started
    message = str(error.value)
    assert f"dashboard-agent-listen-port 127.0.0.1:{holder.port} is taken by pid {holder.pid} (" in message
    assert f"{local_ray.ray_start.PORT_ATTEMPTS} choices of free ports were each taken" in message
    assert len(head.port_retries) == local_ray.ray_start.PORT_ATTEMPTS - 1
    assert group_members(head.process.pid) == [], "processes of the failed head were left running"
    assert elapsed < 3 * FAIL_FAST_SECONDS, f"took {elapsed:.0f} s"


def test_the_holder_of_a_port_is_named_with_its_command_line():
    with PortHolder("html") as holder:
        assert local_ray.port_in_use(holder.port)
        described = local_ray.port_holder(holder.port)
    assert described.startswith(f"pid {holder.pid} (") and sys.executable in described
    assert not local_ray.port_in_use(holder.port)


def _sockets_bound_to(ports):
    """A stand-in for socket.socket whose bind to port 0 gets the next of `ports`: a kernel
    handing out ports from a range of just a few, so collisions are likely."""

    class FewPorts:
        def __init__(self, *_):
            self.port = None

        def __enter__(self):
            return self

        def __exit__(self, *_):
            return False

        def bind(self, _address):
            self.port = next(ports)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    return FewPorts


def test_every_port_a_head_passes_to_ray_start_is_its_own(monkeypatch, tmp_path):
    """Ray refuses to start when two of its components get one port; ports probed and closed
    one at a time can come back from the kernel twice (CI saw node_manager == gcs_server)."""
    launched: list[list[str]] = []

    class Recorded:
        def __init__(self, command, **_):
            launched.append(command)

    monkeypatch.setattr(local_ray.ray_start.subprocess, "Popen", Recorded)
    # Make collisions likely: the kernel hands out ports from a range of just a few.
    pool = iter([41001, 41001, 41002, 41001, 41002, 41003, *range(41003, 41100)])
    monkeypatch.setattr(local_ray.ports.socket, "socket", _sockets_bound_to(pool))
    head = LocalRayHead()
    head.temp_dir = str(tmp_path)
    head._launch(
        [f"--dashboard-port={head.dashboard_port}", f"--port={head.gcs_port}", "--ray-client-server-port=41003"], {}
    )
    ports = [int(argument.rpartition("=")[2]) for argument in launched[0] if "-port=" in argument]
    assert len(ports) == 9 and len(set(ports)) == 9, launched[0]


def test_free_ports_are_distinct_and_avoid_the_given_ones():
    avoid = set(local_ray.free_ports(5))
    ports = local_ray.free_ports(300, avoid=avoid)
    assert len(set(ports)) == 300 and not avoid & set(ports)


def test_free_ports_are_outside_the_kernels_ephemeral_range_and_rays_worker_ports():
    """CI saw a head's dashboard fail to bind the port chosen for it: an outgoing connection of
    Ray's own processes had taken it from the ephemeral range meanwhile."""
    ephemeral = local_ray.ephemeral_ports()
    ports = local_ray.free_ports(50)
    assert all(port not in ephemeral and port > local_ray.RAY_WORKER_PORTS_END for port in ports), ports


def test_free_ports_follow_the_range_the_kernel_is_set_to(monkeypatch, tmp_path):
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("20000\t65400\n")
    monkeypatch.setattr(local_ray.ports, "_EPHEMERAL_RANGE", setting)
    assert set(local_ray.free_ports(20)) <= set(range(65401, 65536))
    with pytest.raises(local_ray.LocalRayError, match=r"ephemeral range 20000-65400"):
        local_ray.free_ports(200)


def test_an_autoscaling_heads_ports_are_all_its_own_the_autoscalers_included(monkeypatch):
    """The autoscaler's metrics port is given to Ray in the environment, not as an option: the
    ports `ray start` gets as options must not take it (Ray's default for it is one fixed port)."""
    launched: list[tuple[list[str], dict[str, str]]] = []

    class Recorded:
        def __init__(self, command, env, **_):
            launched.append((command, env))

    monkeypatch.setattr(local_ray.ray_start.subprocess, "Popen", Recorded)
    monkeypatch.setattr(LocalRayHead, "_wait_until", lambda *_, **__: None)
    monkeypatch.setattr(local_ray.head, "port_in_use", lambda port, host="127.0.0.1": False)
    # The kernel hands out 41001, 41002 (dashboard, GCS), 41003, 41004 (client server, the
    # autoscaler's metrics), then those two again first.
    pool = iter([41001, 41002, 41003, 41004, 41003, 41004, *range(41005, 41100)])
    monkeypatch.setattr(local_ray.ports.socket, "socket", _sockets_bound_to(pool))
    head = LocalRayHead(worker_slices=WorkerSlices(max_slices=3, idle_timeout_seconds=7))
    try:
        head.start()
        [(command, env)] = launched
        ports = [int(argument.rpartition("=")[2]) for argument in command if "-port=" in argument]
        ports.append(int(env[AUTOSCALER_METRIC_PORT_ENV]))
        assert len(ports) == 10 and len(set(ports)) == 10, (command, env[AUTOSCALER_METRIC_PORT_ENV])
        # The head offers no CPU; the autoscaler reads this head's own config, with its GCS.
        assert "--num-cpus=0" in command
        [config_option] = [argument for argument in command if argument.startswith("--autoscaling-config=")]
        config = json.loads(Path(config_option.partition("=")[2]).read_text())
        assert config["provider"]["gcs_address"] == head.gcs_address
        assert config["available_node_types"]["slice"]["max_workers"] == 3
        assert {name: env[name] for name in ("RAY_FAKE_CLUSTER", "RAY_enable_autoscaler_v2")} == {
            "RAY_FAKE_CLUSTER": "1",
            "RAY_enable_autoscaler_v2": "1",
        }
    finally:
        shutil.rmtree(head.temp_dir, ignore_errors=True)


def test_a_head_with_worker_slices_refuses_cpus_of_its_own():
    with pytest.raises(LocalRayError, match=r"num_cpus = 2: a head with worker_slices offers no CPUs"):
        LocalRayHead(num_cpus=2, worker_slices=WorkerSlices())


def environ_has(pid: int, entry: str) -> bool:
    try:
        return entry.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def test_an_autoscaling_head_adds_a_loopback_node_for_a_job_and_stop_ends_it_all(tmp_path):
    """The autoscaler adds a node only once a job asks for what the head lacks (a CPU); the
    node, started by the autoscaler rather than by us, listens on loopback only, and stop()
    ends it with the rest of the head's session, the job on it included, within its bound."""
    slices = WorkerSlices(max_slices=2, idle_timeout_seconds=60)
    with LocalRayHead(worker_slices=slices) as head, head.client_environment():
        assert head.slice_nodes() == []
        client = JobSubmissionClient(head.address)
        pid_file = tmp_path / "job.pid"
        job_id = submit(client, entrypoint=f"sh -c 'echo $$ > {pid_file}; exec sleep 300'", entrypoint_num_cpus=1)
        wait_until(lambda: client.get_job_status(job_id) == JobStatus.RUNNING, 90, "the job RUNNING")
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, "the job's pid file")
        job_pid = int(pid_file.read_text())
        job_started = process_start(job_pid)
        # One node, for the one CPU asked, though the group may have two.
        assert len(head.slice_nodes()) == 1

        session = head._session_processes()
        # The node's processes: Ray gives each its node type in the environment.
        node_processes = {pid for pid in session if environ_has(pid, f"RAY_NODE_TYPE_NAME={slices.node_type}")}
        assert any(b"raylet" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in node_processes), node_processes
        assert job_pid in session and job_pid in node_processes, "the job should run on the added node"
        assert listeners(node_processes), "the node listens nowhere?"
        assert not_on_loopback(session) == {}
        group = head.process.pid

        started = time.monotonic()
        head.stop()
        elapsed = time.monotonic() - started
    print(f"stop() with an added node and a job on it took {elapsed:.2f} s")
    assert elapsed < STOP_BOUND_SECONDS
    assert process_start(job_pid) != job_started, f"the job's process {job_pid} outlived stop()"
    assert [pid for pid in node_processes if process_start(pid) == session[pid]] == [], "the node outlived stop()"
    assert [pid for pid, start in session.items() if process_start(pid) == start] == []
    assert group_members(group) == []


def test_an_autoscaler_that_cannot_start_fails_the_heads_start_and_leaves_no_process(monkeypatch):
    """A config the autoscaler refuses ends it, and `ray start` with it, right after the head's
    dashboard is up: start() must fail saying why rather than return a head that is going away,
    and none of the processes `ray start` left behind may outlive it."""
    config = WorkerSlices.autoscaling_config
    monkeypatch.setattr(
        WorkerSlices, "autoscaling_config", lambda self, gcs_address: {**config(self, gcs_address), "not_a_key": 1}
    )
    head = LocalRayHead(worker_slices=WorkerSlices())
    started = time.monotonic()
    with pytest.raises(LocalRayError, match="ray start exited with") as error:
        head.start()
    print(f"start() failed after {time.monotonic() - started:.1f} s")
    assert "'not_a_key': 1" in str(error.value), "the message should show the autoscaler's error"
    assert group_members(head.process.pid) == [], "processes of the failed head were left running"
