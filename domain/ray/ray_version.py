"""The one Ray version of the project.

Ray requires the same version on the head, on every worker and in the job client, so everything
that names it reads it from here: the worker image's base (domain/resources/worker_image.py),
the RayCluster's `rayVersion` (domain/resources/kuberay.py) and the examples in messages. The files
Python cannot import (trainer/Dockerfile, requirements.in, requirements-trainer.in and their
locks) are held to it by tests/test_worker_image.py.

A leaf module (no project import), so domain.config.settings can use it too.
"""

from __future__ import annotations

RAY_VERSION = "2.60.0"

# KubeRay refuses a RayCluster with token authentication (domain/resources/kuberay.py) unless
# spec.rayVersion says the Ray in its image is at least this, the first Ray with token authentication.
MIN_RAY_VERSION_FOR_TOKEN_AUTH = "2.52.0"


def version_key(version: str) -> tuple[int, ...]:
    """`2.52.0` -> (2, 52, 0), comparable with `<`."""
    return tuple(int(part) for part in version.split("."))
