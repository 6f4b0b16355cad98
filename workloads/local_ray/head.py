"""LocalRayHead: a loopback-only Ray head with its own token, optionally open to nodes
(LocalRayNode) or autoscaling a worker group (WorkerSlices)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from domain.paths import PROJECT_ROOT
from domain.ray.preemption import DRAIN_TIMEOUT_ENV, POLL_INTERVAL_ENV, PREEMPTION_POLL_SECONDS
from workloads.local_ray.auth import dashboard_answers, refresh_ray_auth_caches, set_environ
from workloads.local_ray.errors import LocalRayError
from workloads.local_ray.ports import free_port, free_ports, port_holder, port_in_use
from workloads.local_ray.ray_start import PortsTaken, RayStart
from workloads.local_ray.slices import AUTOSCALER_ENV, AUTOSCALER_METRIC_PORT_ENV, WorkerSlices

TRAINER_VENV = PROJECT_ROOT / ".venv-trainer"

# Ray registers the dashboard before it says "Ray runtime started."; one silent this long is dead.
DASHBOARD_AFTER_START_SECONDS = 30.0
# What `ray start` prints when the head cannot work; with its port taken Ray goes on without a
# dashboard, and start() would wait its whole start_timeout for it.
_DASHBOARD_PORT_TAKEN = re.compile(r"Failed to bind to (?P<host>[^\s:]+):(?P<port>\d+) because it's already occupied")
_DASHBOARD_FAILED = "Failed to start the dashboard"
_RUNTIME_STARTED = "Ray runtime started."


class LocalRayHead(RayStart):
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
        gcs_port: int | None = None,
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
        self.gcs_port = gcs_port or free_ports(1, avoid={self.dashboard_port})[0]
        # A taken port the caller chose is an error; one chosen here is chosen again.
        self.given_ports = frozenset(
            option for option, port in (("dashboard-port", dashboard_port), ("port", gcs_port)) if port
        )
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
        set_environ(changes)
        refresh_ray_auth_caches()
        try:
            yield
        finally:
            set_environ(saved)
            refresh_ray_auth_caches()

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
                given = {"dashboard": "dashboard-port", "GCS": "port"}.get(what) in self.given_ports
                raise PortsTaken(
                    f"cannot start a Ray head: its {what} port 127.0.0.1:{port} is taken by {port_holder(port)}"
                    + ("; stop that process or use another port" if given else ""),
                    ours=not given,
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

    def _choose_new_ports(self) -> None:
        super()._choose_new_ports()
        avoid = {self.dashboard_port, self.gcs_port}
        if "dashboard-port" not in self.given_ports:
            self.dashboard_port = free_ports(1, avoid=avoid)[0]
        if "port" not in self.given_ports:
            self.gcs_port = free_ports(1, avoid=avoid | {self.dashboard_port})[0]

    def _start_once(self) -> None:
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
