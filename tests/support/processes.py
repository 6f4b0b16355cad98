"""Processes as /proc shows them (Linux): a test's check that what it started is gone."""

from __future__ import annotations

from pathlib import Path


def process_start(pid: int) -> int | None:
    """The start time of a live (not zombie) process, None if there is none with this pid: with
    the pid, it names one process even after the pid is reused."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return None if fields[0] in (b"Z", b"X") else int(fields[19])
