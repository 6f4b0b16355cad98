"""A loopback-only Ray head on this machine, started as our own child and stopped by its pid.

`ray start --head --block` stays in the foreground and takes the head's processes down with it
when it ends, so stopping it never touches another user's Ray (unlike `ray stop`, which ends
every Ray process of the machine by name). It runs from the trainer's virtualenv, so jobs find
MaxText there without installing anything.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TRAINER_VENV = PROJECT_ROOT / ".venv-trainer"


class LocalRayError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def dashboard_answers(address: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{address}/api/version", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def _group_alive(group_id: int) -> bool:
    try:
        os.killpg(group_id, 0)
    except ProcessLookupError:
        return False
    return True


class LocalRayHead:
    """Context manager: `with LocalRayHead() as head: submit to head.address`."""

    def __init__(
        self,
        venv: Path = TRAINER_VENV,
        dashboard_port: int | None = None,
        num_cpus: int | None = None,
        start_timeout: float = 120.0,
    ):
        self.venv = venv
        self.dashboard_port = dashboard_port or free_port()
        self.num_cpus = num_cpus
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self.temp_dir: str | None = None
        self.log_path: Path | None = None

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self) -> "LocalRayHead":
        ray = self.venv / "bin" / "ray"
        if not ray.exists():
            raise LocalRayError(f"{ray} not found; run ./scripts/setup to create the trainer environment")
        # A short private temp dir: Ray's unix sockets must fit in ~107 characters, and a
        # private one keeps this head apart from any other Ray session on the machine.
        self.temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        self.log_path = Path(self.temp_dir) / "head.log"
        command = [
            str(ray), "start", "--head", "--block",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            # Every other fixed default port too, so this head can run beside another one.
            f"--port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            f"--ray-client-server-port={free_port()}",
            f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
        ]
        if self.num_cpus is not None:
            command.append(f"--num-cpus={self.num_cpus}")
        env = {
            **os.environ,
            # Without it Ray binds the machine's routable address instead of loopback.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            # Job entrypoints (`python -m trainer...`) resolve to the trainer environment.
            "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(self.venv),
        }
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + self.start_timeout
        while not dashboard_answers(self.address):
            if self.process.poll() is not None:
                raise LocalRayError(f"ray start exited with {self.process.returncode}:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise LocalRayError(f"the Ray head did not answer within {self.start_timeout:.0f} s:\n{self._log_tail()}")
            time.sleep(0.5)
        return self

    def _log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        """Ends the `ray start --block` we started, then waits for the rest of its session
        (dashboard helpers exit a moment later); that session holds only our processes."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=timeout)
        deadline = time.monotonic() + 10
        while _group_alive(self.process.pid):
            if time.monotonic() > deadline:
                os.killpg(self.process.pid, signal.SIGKILL)
                break
            time.sleep(0.2)

    def __enter__(self) -> "LocalRayHead":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
