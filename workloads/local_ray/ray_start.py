"""RayStart, the base of LocalRayHead and LocalRayNode: one `ray start --block` of ours, started as
our child in a session of its own, and its stop, by pid, of every process of its Ray session."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from workloads.local_ray import processes
from workloads.local_ray.errors import LocalRayError
from workloads.local_ray.ports import free_ports, port_holder, port_in_use, ports_of

# Inherited by every process of the head's Ray session, so stop() finds those that left our
# process group (_session_processes).
SESSION_MARKER_ENV = "MAXTEXT_LOCAL_RAY_HEAD"

# Room for `ray start --block`'s orderly exit after SIGTERM (docs/testing.md, "The local Ray head").
STOP_GRACE_SECONDS = 5.0
# stop() returns within this, or raises: unbounded, a head with a job running took ~31 s.
STOP_BOUND_SECONDS = 12.0
# A port chosen free can be taken before Ray binds it (by another process choosing ports at that
# moment); Ray then goes on without that part: a job agent that cannot listen leaves the head
# answering "No available agent" to every job (CI saw it). start() then chooses ports again.
PORT_ATTEMPTS = 3
_PORT_OPTION = re.compile(r"--(?P<option>[a-z-]*port)=(?P<port>\d+)")


class PortsTaken(LocalRayError):
    """Ports given to `ray start` that another process holds; `ours` when this code chose them
    all (a fresh choice may work), not when the caller gave one of them."""

    def __init__(self, message: str, ours: bool):
        super().__init__(message)
        self.ours = ours


class RayStart:
    """One `ray start --block` of ours, a head or a node joining one, and every process of its
    Ray session: started as our child in a session of its own, stopped by pid (see stop())."""

    def __init__(self, venv: Path, num_cpus: int | None, start_timeout: float):
        self.venv = venv
        self.num_cpus = num_cpus
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self.temp_dir: str | None = None
        self.log_path: Path | None = None
        # Every port on `ray start`'s command line, by option; start() returns once each is
        # listened on by this session. `given_ports`: the options whose port the caller chose.
        self.ports: dict[str, int] = {}
        self.given_ports: frozenset[str] = frozenset()
        self.port_retries: list[str] = []  # why each earlier attempt of start() chose ports again

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
        given = {match["option"]: int(match["port"]) for match in map(_PORT_OPTION.fullmatch, arguments) if match}
        chosen = dict(zip(options, free_ports(len(options), avoid=set(given.values()) | reserved), strict=True))
        command += [f"--{option}={port}" for option, port in chosen.items()]
        if self.num_cpus is not None:
            command.append(f"--num-cpus={self.num_cpus}")
        command.append("--disable-usage-stats")
        self.ports = {**given, **chosen}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**env, SESSION_MARKER_ENV: self.temp_dir},
                start_new_session=True,
            )

    def _wait_until(self, ready, what: str, failed=lambda: None) -> None:
        """Waits for `ready()` and for every port in `ports` to be listened on by this session;
        fails as soon as another process holds one of them (PortsTaken), `ray start` exits or
        `failed()` names a reason it will never be ready, else after start_timeout."""
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            waiting, taken = self._port_states()
            if not waiting and ready():
                return
            if taken:
                self.stop()
                holders = "; ".join(
                    f"its {option} 127.0.0.1:{port} is taken by {holder}" for option, port, holder in taken
                )
                ours = not {option for option, _, _ in taken} & self.given_ports
                advice = "" if ours else "; stop that process or use another port"
                raise PortsTaken(f"cannot start {what}: {holders}{advice}", ours=ours)
            if self._exited():
                self.stop()  # whatever it left behind
                raise LocalRayError(f"ray start exited with {self.process.returncode}:\n{self._log_tail()}")
            reason = failed()
            if reason is not None:
                self.stop()
                raise LocalRayError(f"{reason}\n--- ray start's log ---\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                unbound = ", ".join(f"{option} 127.0.0.1:{port}" for option, port in waiting.items())
                not_listening = f" (nothing of it listens on {unbound})" if unbound else ""
                raise LocalRayError(
                    f"{what} did not come up within {self.start_timeout:.0f} s{not_listening}:\n{self._log_tail()}"
                )
            time.sleep(0.5)

    def _port_states(self) -> tuple[dict[str, int], list[tuple[str, int, str]]]:
        """(the ports this session does not listen on yet, by option; those another process
        holds, with who). In use is read before the session's own ports: a port of ours in use
        then is bound by the time they are read, so it is never mistaken for another's."""
        in_use = {option: port for option, port in self.ports.items() if port_in_use(port)}
        own = ports_of(self._session_processes())
        waiting = {option: port for option, port in self.ports.items() if port not in own.listening}
        taken = [(option, port, port_holder(port)) for option, port in in_use.items() if port not in own.bound]
        return waiting, taken

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
        stats = processes.stats()
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
        found.update(
            pid for pid in stats if pid not in found and processes.environ_has(pid, SESSION_MARKER_ENV, self.temp_dir)
        )
        found.discard(os.getpid())
        return {pid: stats[pid].started for pid in found if stats[pid].state not in processes.GONE}

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
            left = sorted(pid for pid, started in session.items() if processes.alive(pid, started))
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
            if processes.alive(pid, started):  # the same process, not a later one with its pid
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Self:
        """Starts `ray start` and waits until it is ready, choosing its ports again (up to
        PORT_ATTEMPTS choices) when another process takes one it chose before Ray binds it."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start_once()
                return self
            except PortsTaken as taken:
                if not taken.ours:
                    raise
                if attempt == PORT_ATTEMPTS:
                    raise LocalRayError(
                        f"{taken} ({PORT_ATTEMPTS} choices of free ports were each taken before Ray bound them)"
                    ) from taken
                self.port_retries.append(str(taken))
                self._choose_new_ports()
        raise AssertionError("unreachable")

    def _start_once(self) -> None:
        raise NotImplementedError

    def _choose_new_ports(self) -> None:
        """Forgets the ports of a failed attempt; _launch chooses its own again."""
        self.temp_dir = None
