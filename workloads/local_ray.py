"""A loopback-only Ray head on this machine, started as our own child and stopped by its pid.

`ray start --head --block` stays in the foreground and takes the head's processes down with it
when it ends; stop() then kills, by pid, whatever of this head's session is left (a running
job's processes live in sessions of their own), so it never touches another user's Ray (unlike
`ray stop`, which ends every Ray process of the machine by name). It runs from the trainer's
virtualenv, so jobs find MaxText there without installing anything.

The head requires Ray's token authentication (`RAY_AUTH_MODE=token`): the dashboard, the Jobs
API included, answers 401 without the token and 403 with a wrong one. Each head gets a fresh
random token, kept in a 0600 file in a 0700 directory of its temp dir; only that file's path
(with RAY_AUTH_MODE=token: `client_env`) is passed around, never the token itself.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import psutil  # type: ignore[import-untyped]  # psutil ships no type information

from domain.paths import PROJECT_ROOT
from domain.ray.preemption import DRAIN_TIMEOUT_ENV, POLL_INTERVAL_ENV, PREEMPTION_POLL_SECONDS

TRAINER_VENV = PROJECT_ROOT / ".venv-trainer"

# Inherited by every process of the head's Ray session, so stop() finds those that left our
# process group (_session_processes).
SESSION_MARKER_ENV = "MAXTEXT_LOCAL_RAY_HEAD"

# Room for `ray start --block`'s orderly exit after SIGTERM (docs/testing.md, "The local Ray head").
STOP_GRACE_SECONDS = 5.0
# stop() returns within this, or raises: unbounded, a head with a job running took ~31 s.
STOP_BOUND_SECONDS = 12.0
# Ray registers the dashboard before it says "Ray runtime started."; one silent this long is dead.
DASHBOARD_AFTER_START_SECONDS = 30.0
# What `ray start` prints when the head cannot work; with its port taken Ray goes on without a
# dashboard, and start() would wait its whole start_timeout for it.
_DASHBOARD_PORT_TAKEN = re.compile(r"Failed to bind to (?P<host>[^\s:]+):(?P<port>\d+) because it's already occupied")
_DASHBOARD_FAILED = "Failed to start the dashboard"
_RUNTIME_STARTED = "Ray runtime started."


class LocalRayError(RuntimeError):
    pass


# Ray's default worker ports are 10002-19999; ports chosen here start above them.
RAY_WORKER_PORTS_END = 19999
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports() -> range:
    """The ports the kernel hands to outgoing connections and to bind(port 0). A listening port
    chosen from them can be taken, between the choice and Ray's bind, by any connection that
    Ray's own processes open meanwhile: CI saw a dashboard fail so."""
    try:
        low, high = (int(value) for value in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def free_ports(count: int, avoid: frozenset[int] | set[int] = frozenset()) -> list[int]:
    """`count` distinct free loopback ports, none in `avoid`, none Ray's workers use and none
    the kernel gives to outgoing connections (ephemeral_ports). The probes stay bound until all
    are chosen, and Ray refuses to start when two of its components are given one port."""
    ephemeral = ephemeral_ports()
    candidates = [
        port for port in range(RAY_WORKER_PORTS_END + 1, 65536) if port not in ephemeral and port not in avoid
    ]
    random = secrets.SystemRandom()
    random.shuffle(candidates)
    with contextlib.ExitStack() as stack:
        chosen: list[int] = []
        for port in candidates:
            probe = stack.enter_context(socket.socket())
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                continue
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise LocalRayError(
        f"found {len(chosen)} of the {count} free loopback ports needed outside the ephemeral range "
        f"{ephemeral.start}-{ephemeral.stop - 1} and Ray's worker ports (up to {RAY_WORKER_PORTS_END})"
    )


def free_port() -> int:
    return free_ports(1)[0]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a listener holds `host:port`, tested the way Ray tests its dashboard port
    (SO_REUSEADDR, so connections of an earlier process in TIME_WAIT do not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def port_holder(port: int) -> str:
    """Who holds TCP `port` on loopback, as `pid N (command line)`: the process of a listener on
    it that a loopback client reaches (bound to a loopback address or to every address). Another
    user's processes cannot be read, so then it says how to find it."""
    holders = []
    for connection in psutil.net_connections(kind="tcp"):
        if connection.status != psutil.CONN_LISTEN or not connection.laddr or connection.laddr.port != port:
            continue
        ip = ipaddress.ip_address(connection.laddr.ip.partition("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if connection.pid is None or not (ip.is_loopback or ip.is_unspecified):
            continue  # another user's process, or a listener loopback does not reach
        try:
            command = " ".join(psutil.Process(connection.pid).cmdline())
        except psutil.Error:
            command = "?"
        holder = f"pid {connection.pid} ({command.strip()[:200]})"
        if holder not in holders:
            holders.append(holder)
    if holders:
        return ", ".join(holders)
    return f"a process this user cannot see (`sudo ss -ltnp 'sport = :{port}'` names it)"


def dashboard_answers(address: str, timeout: float = 2.0, headers: Mapping[str, str] | None = None) -> bool:
    """Whether the dashboard at `address` answers /api/version with 200. Under token auth that
    path needs the token (without one Ray lets through only the index page, the health checks,
    /api/authentication_mode, /api/authenticate and static files: ray/dashboard/
    http_server_head.py): pass `headers` (LocalRayHead.auth_headers), or a head that wants a
    token answers 401 (403 for a wrong one) and this returns False."""
    request = urllib.request.Request(f"{address}/api/version", headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def _set_environ(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _refresh_ray_auth_caches() -> None:
    """Makes this process's Ray client see the current RAY_AUTH_* variables. Ray reads them
    once (RayConfig, and AuthenticationTokenLoader caches the token); ray.init() refreshes them
    the same way when it turns token auth on (ray/_private/authentication/
    authentication_token_setup.py). Nothing to do until Ray's native module is loaded.

    Ray has no public way to do this (2.60), so this reaches into its native module;
    tests/test_local_ray_auth_cache.py fails if Ray moves or changes these two."""
    if "ray._raylet" not in sys.modules:
        return
    # ray/_raylet.pyi, Ray's stub for its compiled module, declares only the ID classes.
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


# ------------------------------------------------------------------ processes, from the process table
GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)  # a zombie has exited already: it only waits to be reaped


class _Stat(NamedTuple):
    state: str
    parent: int
    group: int
    started: float  # the process's creation time: tells a process from a later one reusing its pid


def _stat_of(process: psutil.Process) -> _Stat | None:
    try:
        with process.oneshot():
            return _Stat(process.status(), process.ppid(), os.getpgid(process.pid), process.create_time())
    except (psutil.Error, OSError):  # gone
        return None


def _stat(pid: int) -> _Stat | None:
    try:
        return _stat_of(psutil.Process(pid))
    except psutil.Error:
        return None


def _stats() -> dict[int, _Stat]:
    """{pid: _Stat} of every process of the machine."""
    return {process.pid: stat for process in psutil.process_iter() if (stat := _stat_of(process)) is not None}


def _group_alive(group_id: int) -> bool:
    """Whether a process of the group still runs (zombies, already dead, do not count)."""
    return any(stat.group == group_id and stat.state not in GONE for stat in _stats().values())


def _environ_has(pid: int, name: str, value: str) -> bool:
    try:
        return psutil.Process(pid).environ().get(name) == value
    except psutil.Error:  # gone, or another user's process we may not read: not ours either way
        return False


def _alive(pid: int, started: float) -> bool:
    """The same process (pid and start time) still exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat.started == started and stat.state not in GONE


class _RayStart:
    """One `ray start --block` of ours, a head or a node joining one, and every process of its
    Ray session: started as our child in a session of its own, stopped by pid (see stop())."""

    def __init__(self, venv: Path, num_cpus: int | None, start_timeout: float):
        self.venv = venv
        self.num_cpus = num_cpus
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self.temp_dir: str | None = None
        self.log_path: Path | None = None

    def _launch(self, arguments: list[str], env: Mapping[str, str], reserved: frozenset[int] = frozenset()) -> None:
        """Starts `ray start --block` on loopback with `arguments`, every other port free and
        none of `reserved` (ports given to Ray in `env`)."""
        ray = self.venv / "bin" / "ray"
        if not ray.exists():
            raise LocalRayError(f"{ray} not found; run ./scripts/setup to create the trainer environment")
        # Short: Ray's unix socket paths must fit in ~107 characters.
        if self.temp_dir is None:
            self.temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        self.log_path = Path(self.temp_dir) / "ray-start.log"
        command = [
            str(ray),
            "start",
            "--block",
            "--node-ip-address=127.0.0.1",
            # Its own session, logs included: nodes sharing one would each forward every log.
            f"--temp-dir={self.temp_dir}",
            *arguments,
        ]
        # Every fixed default port too, so this can run beside another Ray on the machine.
        options = (
            "dashboard-agent-listen-port",
            "dashboard-agent-grpc-port",
            "metrics-export-port",
            "runtime-env-agent-port",
            "node-manager-port",
            "object-manager-port",
        )
        given = {int(value) for value in re.findall(r"-port=(\d+)$", "\n".join(arguments), re.MULTILINE)} | reserved
        for option, port in zip(options, free_ports(len(options), avoid=given), strict=True):
            command.append(f"--{option}={port}")
        if self.num_cpus is not None:
            command.append(f"--num-cpus={self.num_cpus}")
        command.append("--disable-usage-stats")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**env, SESSION_MARKER_ENV: self.temp_dir},
                start_new_session=True,
            )

    def _wait_until(self, ready, what: str, failed=lambda: None) -> None:
        """Waits for `ready()`; fails as soon as `ray start` exits or `failed()` names a reason
        it will never be ready, else after start_timeout."""
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            if self._exited():
                self.stop()  # whatever it left behind
                raise LocalRayError(f"ray start exited with {self.process.returncode}:\n{self._log_tail()}")
            reason = failed()
            if reason is not None:
                self.stop()
                raise LocalRayError(f"{reason}\n--- ray start's log ---\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise LocalRayError(f"{what} did not come up within {self.start_timeout:.0f} s:\n{self._log_tail()}")
            time.sleep(0.5)

    def _exited(self) -> bool:
        """Whether `ray start` has exited, without reaping it. Unreaped, its pid, and so its
        process group's id, cannot go to another process, so stop() still finds the processes it
        left in its group: when one of Ray's processes dies, `ray start` exits and ends the
        others, but not always all (dashboard modules and agents were seen to outlive it), and
        those retitle themselves, which can wipe the session marker from their environment."""
        assert self.process is not None
        if self.process.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # reaped elsewhere
            return True

    def _log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def _log_tail(self, lines: int = 30) -> str:
        return "\n".join(self._log().splitlines()[-lines:])

    def _session_processes(self) -> dict[int, float]:
        """{pid: start time} of the live processes of this head's Ray session.

        Ray does not keep its session in our process group: the raylet starts workers in
        process groups of their own, and the job supervisor starts each job's entrypoint (and
        a watcher shell) with start_new_session=True (ray/dashboard/modules/job/
        job_supervisor.py, _exec_entrypoint), so a killpg of `ray start` misses them. What we
        rely on, both true only of processes this head started:
          - ancestry: they descend from our `ray start` (parent links in the process table), or
            share its process group. Only while `ray start` is not reaped: until then its pid,
            and so its group id, cannot belong to anyone else. stop() collects this before it
            sends any signal, while every parent still lives;
          - environment: they inherited SESSION_MARKER_ENV=<our temp dir> (Ray passes
            its environment on to everything it starts, job entrypoints included). This finds
            the ones re-parented to init after their parent died. The temp dir is unique to
            this head, so no other Ray session, another user's or ours, carries that value.
        A process that both left the tree and cleared its environment would escape; Ray's own
        processes and job entrypoints do neither.
        """
        if self.process is None or self.temp_dir is None:
            return {}
        stats = _stats()
        found: set[int] = set()
        if self.process.returncode is None:
            root = self.process.pid
            children: dict[int, list[int]] = {}
            for pid, stat in stats.items():
                children.setdefault(stat.parent, []).append(pid)
            pending = [root]
            while pending:
                pid = pending.pop()
                if pid in stats and pid not in found:
                    found.add(pid)
                    pending.extend(children.get(pid, []))
            found.update(pid for pid, stat in stats.items() if stat.group == root)
        found.update(pid for pid in stats if pid not in found and _environ_has(pid, SESSION_MARKER_ENV, self.temp_dir))
        found.discard(os.getpid())
        return {pid: stats[pid].started for pid in found if stats[pid].state not in GONE}

    def stop(self) -> None:
        """Ends this `ray start` and every process of its Ray session, a running job's
        included, within STOP_BOUND_SECONDS: SIGTERM to `ray start`, STOP_GRACE_SECONDS for it
        to end its subprocesses, then SIGKILL to its process group and to each process of the
        session (see _session_processes). Touches no process it did not start."""
        if self.process is None:
            return
        deadline = time.monotonic() + STOP_BOUND_SECONDS
        session = self._session_processes()  # first: before any parent dies
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        # Then SIGKILL whatever is left, sweeping again for anything started in between; a
        # zombie counts as gone (init reaps it).
        while True:
            session.update(self._session_processes())
            self._kill(session)
            left = sorted(pid for pid, started in session.items() if _alive(pid, started))
            if not left and self.process.poll() is not None:
                break
            if time.monotonic() > deadline:
                raise LocalRayError(
                    f"processes {left} of the Ray head in {self.temp_dir} outlived SIGKILL; "
                    f"stop() gave up after {STOP_BOUND_SECONDS:.0f} s"
                )
            time.sleep(0.1)

    def _kill(self, session: dict[int, float]) -> None:
        assert self.process is not None
        if self.process.returncode is None:
            # Not reaped yet, so its pid (the group's id) cannot have been reused.
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid, started in session.items():
            if _alive(pid, started):  # the same process, not a later one with its pid
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self):
        raise NotImplementedError


# ------------------------------------------------------------------ an autoscaled worker group
# Ray's autoscaler v2 with its fake multi-node provider: a real scale-from-zero on this machine.
# Named as an `external` provider: Ray 2.60's wheel lacks the defaults file `fake_multinode` loads
# (docs/testing.md, "The local Ray head").
FAKE_PROVIDER = {
    "type": "external",
    "module": "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider",
}
HEAD_NODE_TYPE = "ray.head.default"
HEAD_INSTANCE_ID = "local-head"
# Per head: Ray's default is a fixed port (44217), which two heads would share.
AUTOSCALER_METRIC_PORT_ENV = "AUTOSCALER_METRIC_PORT"
AUTOSCALER_ENV = {
    "RAY_FAKE_CLUSTER": "1",
    "RAY_enable_autoscaler_v2": "1",
    "RAY_CLOUD_INSTANCE_ID": HEAD_INSTANCE_ID,
    # Ray's default is 5 s; a test sees a scale-up or scale-down within about a second.
    "AUTOSCALER_UPDATE_INTERVAL_S": "1",
}


@dataclass(frozen=True)
class WorkerSlices:
    """One autoscaled worker group, as the RayCluster's TPU group is when the stack autoscales:
    0 nodes while idle, one node per slice up to `max_slices` when a job asks, each removed
    after `idle_timeout_seconds` idle. A node carries `cpus_per_slice` CPUs (a CPU job's worker
    takes one) and the custom resource `node_type`, so a test can tell its nodes."""

    max_slices: int = 1
    cpus_per_slice: int = 1
    idle_timeout_seconds: float = 5.0
    node_type: str = "slice"

    def __post_init__(self) -> None:
        problems = []
        if self.max_slices < 1:
            problems.append(f"max_slices = {self.max_slices} must be at least 1 (the most nodes the group may have)")
        if self.cpus_per_slice < 1:
            problems.append(f"cpus_per_slice = {self.cpus_per_slice} must be at least 1 (a CPU worker takes one)")
        if not self.idle_timeout_seconds > 0:
            problems.append(
                f"idle_timeout_seconds = {self.idle_timeout_seconds} must be more than 0 (how long an idle node stays)"
            )
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", self.node_type) or self.node_type == HEAD_NODE_TYPE:
            problems.append(
                f"node_type = {self.node_type!r} is not valid; use letters, digits, '-' and '_', starting "
                f"with a letter (and not {HEAD_NODE_TYPE!r}, the head's)"
            )
        if problems:
            raise LocalRayError("; ".join(problems))

    def autoscaling_config(self, gcs_address: str) -> dict[str, Any]:
        """The cluster config `ray start --head --autoscaling-config` reads, in the format of
        ray/autoscaler/ray-schema.json. The idle timeout is in minutes there (fractions allowed),
        as KubeRay converts autoscalerOptions.idleTimeoutSeconds."""
        return {
            "cluster_name": "local",
            "max_workers": self.max_slices,
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": self.idle_timeout_seconds / 60,
            "provider": {
                **FAKE_PROVIDER,
                # Nodes join this head's GCS (the provider's default is port 6379).
                "gcs_address": gcs_address,
                "head_node_id": HEAD_INSTANCE_ID,
                # Autoscaler v2 asks for several nodes at once.
                "launch_multiple": True,
                # Else autoscaler v2 would try to install Ray on the nodes over SSH.
                "disable_node_updaters": True,
            },
            "head_node_type": HEAD_NODE_TYPE,
            "available_node_types": {
                # The head offers nothing a job's workers need (see LocalRayHead).
                HEAD_NODE_TYPE: {"resources": {}, "node_config": {}, "max_workers": 0},
                self.node_type: {
                    "resources": {"CPU": self.cpus_per_slice, self.node_type: 1},
                    "node_config": {},
                    "min_workers": 0,
                    "max_workers": self.max_slices,
                },
            },
            # What the missing defaults file would have given (the autoscaler reads them all).
            "auth": {},
            "file_mounts": {},
            "cluster_synced_files": [],
            "file_mounts_sync_continuously": False,
            "rsync_exclude": [],
            "rsync_filter": [],
            "initialization_commands": [],
            "setup_commands": [],
            "head_setup_commands": [],
            "worker_setup_commands": [],
            "head_start_ray_commands": [],
            "worker_start_ray_commands": [],
        }


class LocalRayHead(_RayStart):
    """Context manager: `with LocalRayHead() as head: submit to head.address`.

    Every Ray process of a head listens on loopback only. With `multi_node=True` other nodes may
    join it (LocalRayNode); Ray on Linux then binds its GCS, raylets and agents to every
    interface (it has no loopback-only cluster mode: it swaps 127.0.0.1 for the host's routable
    address), still behind the head's token. Only the multi-node tests use it.

    With `worker_slices`, Ray's autoscaler (v2) runs on the head and adds and removes the
    group's nodes itself, through Ray's fake multi-node provider: each node is a raylet and its
    agents started on this machine by the autoscaler, on loopback too (Ray's single-machine mode
    refuses only `ray start` nodes, and gives these 127.0.0.1), in this head's session and temp
    dir, and stop() ends them with the rest of the session. The head then has no CPUs: a job's workers
    run only once the autoscaler has added a node."""

    def __init__(
        self,
        venv: Path = TRAINER_VENV,
        dashboard_port: int | None = None,
        num_cpus: int | None = None,
        start_timeout: float = 120.0,
        multi_node: bool = False,
        worker_slices: WorkerSlices | None = None,
    ):
        if worker_slices is not None:
            if num_cpus:
                raise LocalRayError(
                    f"num_cpus = {num_cpus}: a head with worker_slices offers no CPUs (its jobs' workers "
                    "must wait for the autoscaler's nodes); leave num_cpus unset or 0"
                )
            num_cpus = 0
        super().__init__(venv, num_cpus, start_timeout)
        self.multi_node = multi_node
        self.worker_slices = worker_slices
        # The autoscaler listens there once it has read its config: how start() knows it runs.
        self.autoscaler_metric_port: int | None = None
        self.dashboard_port = dashboard_port or free_port()
        self.gcs_port = free_ports(1, avoid={self.dashboard_port})[0]
        self.token_path: Path | None = None
        self._token: str | None = None
        self._runtime_started_at: float | None = None  # when `ray start` said the runtime is up

    def __repr__(self) -> str:  # never the token
        return f"LocalRayHead(address={self.address!r}, temp_dir={self.temp_dir!r})"

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def gcs_address(self) -> str:
        """Where nodes join (`ray start --address`) and drivers connect (`ray.init`)."""
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def client_env(self) -> dict[str, str]:
        """What a client process (the Pulumi dynamic provider, a test's subprocess) needs in its
        environment to send this head's token: where the token file is, and that token auth is
        on (Ray's clients attach the token only when RAY_AUTH_MODE=token, see
        ray/_private/authentication/http_token_authentication.py)."""
        if self.token_path is None:
            raise LocalRayError("the head has not been started")
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)}

    @property
    def auth_headers(self) -> dict[str, str]:
        """For JobSubmissionClient(head.address, headers=head.auth_headers) and raw HTTP."""
        if self._token is None:
            raise LocalRayError("the head has not been started")
        return {"Authorization": f"Bearer {self._token}"}

    @contextlib.contextmanager
    def client_environment(self) -> Iterator[None]:
        """Puts client_env in this process's environment while the block runs (and takes out
        RAY_AUTH_TOKEN, which would win over the file), restoring the previous values after:
        then JobSubmissionClient(head.address) here and in subprocesses finds the token the
        way it would from a user's shell. Ray caches the auth mode and the token per process,
        so both caches are refreshed on the way in and out, as ray.init() does when it turns
        token auth on; don't use it while this process is connected to a Ray cluster."""
        changes: dict[str, str | None] = {**self.client_env, "RAY_AUTH_TOKEN": None}
        saved = {name: os.environ.get(name) for name in changes}
        _set_environ(changes)
        _refresh_ray_auth_caches()
        try:
            yield
        finally:
            _set_environ(saved)
            _refresh_ray_auth_caches()

    def _write_token(self) -> None:
        assert self.temp_dir is not None
        self._token = secrets.token_hex(32)  # 256 bits, what `ray get-auth-token --generate` makes
        # A 0700 directory: `ray start` makes its temp dirs 0777 without the sticky bit, where
        # anyone could replace the file.
        private = Path(self.temp_dir) / "auth"
        private.mkdir(mode=0o700)
        self.token_path = private / "auth_token"
        descriptor = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as token_file:
            token_file.write(self._token)

    def environment(self) -> dict[str, str]:
        """The environment of every `ray start` of this cluster (the head's and its nodes')."""
        if self.temp_dir is None or self.token_path is None:
            raise LocalRayError("the head has not been started")
        env = {
            **os.environ,
            # "0": Ray's single-machine mode, loopback only; "1" lets nodes join (see above).
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1" if self.multi_node else "0",
            # Job entrypoints (`python -m trainer...`) resolve to the trainer environment.
            "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(self.venv),
            # Inherited by the session, so job drivers' `ray.init()` authenticate too.
            **self.client_env,
            # Ray's 30 s drain on SIGTERM waits for leases a local head has no one to hand to.
            DRAIN_TIMEOUT_ENV: "0",
            # Ray Train looks for drained nodes as often as on the RayCluster.
            POLL_INTERVAL_ENV: str(PREEMPTION_POLL_SECONDS),
            # Ray forwards every file of the libtpu log dir (default /tmp/tpu_logs, where every fit
            # check writes) into each job's log.
            "TPU_LOG_DIR": str(self._tpu_log_dir()),
        }
        if self.worker_slices is not None:
            env.update(AUTOSCALER_ENV)
            if self.autoscaler_metric_port is not None:
                env[AUTOSCALER_METRIC_PORT_ENV] = str(self.autoscaler_metric_port)
        # RAY_AUTH_TOKEN wins over RAY_AUTH_TOKEN_PATH: the caller's must not replace the head's.
        env.pop("RAY_AUTH_TOKEN", None)
        return env

    def _tpu_log_dir(self) -> Path:
        assert self.temp_dir is not None
        directory = Path(self.temp_dir) / "tpu_logs"
        directory.mkdir(exist_ok=True)
        return directory

    def _refuse_taken_ports(self, ports: Mapping[str, int]) -> None:
        """Fails before `ray start` when a port the head must listen on is taken: Ray would go
        on without its dashboard (and start() wait start_timeout for it), or wait for a GCS that
        cannot bind."""
        for what, port in ports.items():
            if port_in_use(port):
                raise LocalRayError(
                    f"cannot start a Ray head: its {what} port 127.0.0.1:{port} is taken by "
                    f"{port_holder(port)}; stop that process or use another port"
                )

    def _start_failure(self, started_at: float) -> str | None:
        """Why this head's dashboard will never answer, from what `ray start` printed so far."""
        log = self._log()
        taken = _DASHBOARD_PORT_TAKEN.search(log)
        if taken:
            port = int(taken["port"])
            return (
                f"the Ray head started without its dashboard: port {taken['host']}:{port} is taken by "
                f"{port_holder(port)}; stop that process or use another port"
            )
        if _DASHBOARD_FAILED in log:
            return "the Ray head's dashboard failed to start (see dashboard.log in the session's logs dir)"
        if _RUNTIME_STARTED in log:
            self._runtime_started_at = self._runtime_started_at or time.monotonic()
            if time.monotonic() - self._runtime_started_at > DASHBOARD_AFTER_START_SECONDS:
                waited = f"{DASHBOARD_AFTER_START_SECONDS:.0f} s (after {time.monotonic() - started_at:.0f} s in all)"
                if dashboard_answers(self.address, headers=self.auth_headers):
                    return (
                        f"the Ray head started, but its autoscaler did not serve on 127.0.0.1:"
                        f"{self.autoscaler_metric_port} within {waited} (see monitor.log in the session's logs dir)"
                    )
                return f"the Ray head started, but its dashboard at {self.address} did not answer within {waited}"
        return None

    def start(self) -> LocalRayHead:
        client_server_port, autoscaler_metric_port = free_ports(2, avoid={self.dashboard_port, self.gcs_port})
        ports = {"dashboard": self.dashboard_port, "GCS": self.gcs_port, "Ray client server": client_server_port}
        if self.worker_slices is not None:
            self.autoscaler_metric_port = autoscaler_metric_port
            ports["autoscaler metrics"] = autoscaler_metric_port
        self._refuse_taken_ports(ports)
        self.temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        self._write_token()  # in the temp dir, before Ray makes it world-writable
        env = self.environment()
        autoscaling: list[str] = []
        if self.worker_slices is not None:
            config_path = Path(self.temp_dir) / "autoscaling-config.json"
            # JSON is YAML, which is what the autoscaler reads.
            config_path.write_text(json.dumps(self.worker_slices.autoscaling_config(self.gcs_address), indent=2))
            autoscaling = [f"--autoscaling-config={config_path}"]
        self._launch(
            [
                "--head",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
                f"--port={self.gcs_port}",
                f"--ray-client-server-port={client_server_port}",
                *autoscaling,
            ],
            env,
            reserved=frozenset(ports.values()),
        )
        started_at = time.monotonic()
        self._runtime_started_at = None
        self._wait_until(
            lambda: dashboard_answers(self.address, headers=self.auth_headers) and self._autoscaler_listens(),
            "the Ray head" if self.worker_slices is None else "the Ray head and its autoscaler",
            failed=lambda: self._start_failure(started_at),
        )
        return self

    def slice_nodes(self) -> list[str]:
        """Ids of the worker group's nodes that the cluster lists alive (Ray's state API), for a
        head with worker_slices. Needs this head's token in the environment (client_environment)."""
        if self.worker_slices is None:
            raise LocalRayError("this head has no worker_slices: start it with LocalRayHead(worker_slices=...)")
        from ray.util.state import list_nodes

        alive = list_nodes(address=self.address, filters=[("state", "=", "ALIVE")], raise_on_missing_output=False)
        return sorted(node.node_id for node in alive if self.worker_slices.node_type in (node.resources_total or {}))

    def _autoscaler_listens(self) -> bool:
        """True without an autoscaler; else whether it serves its metrics, which it does once it
        has read its config (one it cannot read ends it, and `ray start` with it)."""
        return self.autoscaler_metric_port is None or port_in_use(self.autoscaler_metric_port)

    def stop(self) -> None:
        super().stop()
        if self.token_path is not None:
            self.token_path.unlink(missing_ok=True)  # the head is gone; its token is useless


class LocalRayNode(_RayStart):
    """A second machine, on this one: a node that joins a LocalRayHead(multi_node=True), with a
    custom resource of its own (`name`) so a test can find it.

    `preempt()` is what GKE does to a Ray worker pod when its Spot VM is reclaimed: SIGTERM to
    `ray start`, which drains its own node with the preemption reason for `drain_seconds`
    (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S, as the RayCluster sets it: docs/spot.md), then
    stops its processes: once the node is idle (its raylet then ends with the drain's preemption
    reason), or at the deadline."""

    def __init__(
        self,
        head: LocalRayHead,
        name: str,
        num_cpus: int = 1,
        drain_seconds: float = 0.0,
        start_timeout: float = 120.0,
    ):
        super().__init__(head.venv, num_cpus, start_timeout)
        self.drain_seconds = drain_seconds
        if not head.multi_node:
            raise LocalRayError("start the head with LocalRayHead(multi_node=True) to add nodes to it")
        self.head = head
        self.name = name

    def __repr__(self) -> str:
        return f"LocalRayNode(name={self.name!r}, head={self.head.gcs_address!r})"

    def node_id(self) -> str | None:
        """This node's id while the cluster lists it alive, else None."""
        from ray.util.state import list_nodes

        for node in list_nodes(
            address=self.head.address, filters=[("state", "=", "ALIVE")], raise_on_missing_output=False
        ):
            if self.name in (node.resources_total or {}):
                return node.node_id
        return None

    def preempt(self) -> None:
        """SIGTERM to this node's `ray start`, without waiting: it drains the node for
        `drain_seconds`, then ends its processes (stop() cleans up whatever is left)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def start(self) -> LocalRayNode:
        self._launch(
            [f"--address={self.head.gcs_address}", f"--resources={json.dumps({self.name: 1})}"],
            {**self.head.environment(), DRAIN_TIMEOUT_ENV: str(self.drain_seconds)},
        )
        self._wait_until(lambda: self.node_id() is not None, f"node {self.name}")
        return self
