"""What TCP ports a set of processes listens on, and on which addresses, from /proc (Linux): a
test's check that a local cluster's processes stay on loopback."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path


def _listening_sockets() -> dict[str, tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """{socket inode: (address, port)} of every TCP listener this process can see."""
    sockets = {}
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            address, _, port = fields[1].partition(":")
            # Each 32-bit word of the address is printed in host (little-endian) order.
            raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8))
            ip = ipaddress.ip_address(raw[:width])
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            sockets[f"socket:[{fields[9]}]"] = (ip, int(port, 16))
    return sockets


def listeners(pids) -> dict[int, list[tuple[str, int]]]:
    """{pid: [(address, port), ...]} of the TCP listeners each of `pids` holds open (processes
    that are gone or not ours are left out)."""
    sockets = _listening_sockets()
    found: dict[int, list[tuple[str, int]]] = {}
    for pid in pids:
        try:
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        held = [(str(sockets[link][0]), sockets[link][1]) for link in links if link in sockets]
        if held:
            found[pid] = sorted(held)
    return found


def not_on_loopback(pids) -> dict[int, list[tuple[str, int]]]:
    """The listeners of `pids` that a machine other than this one could reach."""
    return {
        pid: outside
        for pid, held in listeners(pids).items()
        if (outside := [(address, port) for address, port in held if not ipaddress.ip_address(address).is_loopback])
    }
