"""The one exception the local Ray cluster raises."""

from __future__ import annotations


class LocalRayError(RuntimeError):
    pass
