"""The one Ray version of the project.

Ray requires the same version on the head, on every worker and in the job client, so everything
that names it reads it from here: the worker image's base (domain/worker_image.py), the
RayCluster's `rayVersion` (domain/kuberay.py) and the examples in messages. The files Python cannot
import (trainer/Dockerfile, requirements.in, requirements-trainer.in and their locks) are held to
it by tests/test_worker_image.py.

A leaf module (no project import), so domain.settings can use it too.
"""

from __future__ import annotations

RAY_VERSION = "2.60.0"
