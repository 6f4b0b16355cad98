"""Loopback ports for a local Ray cluster: free ones outside the kernel's ephemeral range and Ray's
worker ports, whether one is taken, and who holds it."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import secrets
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import psutil  # type: ignore[import-untyped]  # psutil ships no type information

from workloads.local_ray.errors import LocalRayError

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


class OwnPorts(NamedTuple):
    """The TCP ports some processes hold: bound (listening or not yet) and listening."""

    bound: frozenset[int]
    listening: frozenset[int]


def ports_of(pids: Iterable[int]) -> OwnPorts:
    """The TCP ports `pids` hold; a process that has ended holds none. One read of the machine's
    table: asking each process reads the whole table once per process (52 ms for a head's 20
    processes here, against 3.5 ms)."""
    wanted = set(pids)
    bound: set[int] = set()
    listening: set[int] = set()
    for connection in psutil.net_connections(kind="tcp"):
        if connection.pid in wanted and connection.laddr:
            bound.add(connection.laddr.port)
            if connection.status == psutil.CONN_LISTEN:
                listening.add(connection.laddr.port)
    return OwnPorts(frozenset(bound), frozenset(listening))


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
