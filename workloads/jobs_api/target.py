"""What the Jobs API client needs of the place it reaches: a local head (`local.LocalHead`) or a
head service on GKE (`gke.GkeHead`). Everything that differs between the two is here, so the
client never asks which one it has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ClusterCheck:
    """Whether the cluster behind a silent Jobs API is known to be gone, and how we know."""

    gone: bool
    evidence: str


class JobsTarget(Protocol):
    @property
    def address(self) -> str:
        """The Jobs API's base URL, without a trailing slash."""
        ...

    def describe(self) -> str:
        """Where requests go, for a message."""
        ...

    def cluster_name(self) -> str:
        """The cluster, for a message."""
        ...

    def how_to_reach(self) -> str:
        """What to check when the target does not answer."""
        ...

    def how_to_authorize(self) -> str:
        """What to do when the target answers 401 or 403."""
        ...

    def headers(self) -> dict[str, str]:
        """Fresh credentials for a request (minted now: they may expire). Never logged."""
        ...

    def verify(self) -> str | bool:
        """What `requests` and the Ray SDK verify TLS with: True, or a CA bundle's path."""
        ...

    def cluster_check(self) -> ClusterCheck:
        """Whether the cluster is known to be gone, for a Jobs API that does not answer."""
        ...

    def shares_files(self) -> bool:
        """Whether the job's files (its run directory) are this machine's: what the provider
        writes there after the run (its TensorBoard scalars) lands beside the checkpoints."""
        ...

    def close(self) -> None:
        """Releases what `headers` and `verify` hold (the CA bundle)."""
        ...
