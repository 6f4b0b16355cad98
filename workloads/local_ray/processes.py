"""The machine's processes, read from the process table with psutil: a process's state, parent,
group and start time, and whether a process or a process group still lives."""

from __future__ import annotations

import os
from typing import NamedTuple

import psutil  # type: ignore[import-untyped]  # psutil ships no type information

GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)  # a zombie has exited already: it only waits to be reaped


class Stat(NamedTuple):
    state: str
    parent: int
    group: int
    started: float  # the process's creation time: tells a process from a later one reusing its pid


def _stat_of(process: psutil.Process) -> Stat | None:
    try:
        with process.oneshot():
            return Stat(process.status(), process.ppid(), os.getpgid(process.pid), process.create_time())
    except (psutil.Error, OSError):  # gone
        return None


def _stat(pid: int) -> Stat | None:
    try:
        return _stat_of(psutil.Process(pid))
    except psutil.Error:
        return None


def stats() -> dict[int, Stat]:
    """{pid: Stat} of every process of the machine."""
    return {process.pid: stat for process in psutil.process_iter() if (stat := _stat_of(process)) is not None}


def group_alive(group_id: int) -> bool:
    """Whether a process of the group still runs (zombies, already dead, do not count)."""
    return any(stat.group == group_id and stat.state not in GONE for stat in stats().values())


def environ_has(pid: int, name: str, value: str) -> bool:
    try:
        return psutil.Process(pid).environ().get(name) == value
    except psutil.Error:  # gone, or another user's process we may not read: not ours either way
        return False


def alive(pid: int, started: float) -> bool:
    """The same process (pid and start time) still exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat.started == started and stat.state not in GONE
