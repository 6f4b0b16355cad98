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

The modules, by concern: `head` (LocalRayHead) and `node` (LocalRayNode) on their base
`ray_start` (one `ray start --block` and its stop by pid), `slices` (an autoscaled worker group),
`ports` (free loopback ports and who holds one), `processes` (the process table), `auth` (this
process's Ray token settings, a dashboard probe) and `errors`. They import nothing else of
workloads/ (a contract in pyproject.toml's [tool.importlinter]).
"""

from workloads.local_ray.auth import dashboard_answers
from workloads.local_ray.errors import LocalRayError
from workloads.local_ray.head import TRAINER_VENV, LocalRayHead
from workloads.local_ray.node import LocalRayNode
from workloads.local_ray.ports import (
    RAY_WORKER_PORTS_END,
    ephemeral_ports,
    free_port,
    free_ports,
    port_holder,
    port_in_use,
)
from workloads.local_ray.ray_start import STOP_BOUND_SECONDS
from workloads.local_ray.slices import AUTOSCALER_METRIC_PORT_ENV, HEAD_NODE_TYPE, WorkerSlices

__all__ = [
    "AUTOSCALER_METRIC_PORT_ENV",
    "HEAD_NODE_TYPE",
    "RAY_WORKER_PORTS_END",
    "STOP_BOUND_SECONDS",
    "TRAINER_VENV",
    "LocalRayError",
    "LocalRayHead",
    "LocalRayNode",
    "WorkerSlices",
    "dashboard_answers",
    "ephemeral_ports",
    "free_port",
    "free_ports",
    "port_holder",
    "port_in_use",
]
