"""Names the infra program derives from settings, in one place: the resource arguments
(`domain/resources/gcp_resources.py`, `domain/resources/worker_image.py`) build them with these
functions, and the settings check (`domain/config/settings.py`) validates exactly what will be
created.

Pure and free of `domain.config.settings` (which imports this module), so they take plain values.
"""

from __future__ import annotations

# The node service account id is cut to IAM's 30-character limit, so every cluster name yields an
# id of the right length (the cut can still leave a trailing '-', which the settings check
# refuses); a cluster name of up to this many characters keeps the whole `-nodes` suffix.
NODE_SERVICE_ACCOUNT_SUFFIX = "-nodes"
NODE_SERVICE_ACCOUNT_ID_MAX = 30
NODE_SERVICE_ACCOUNT_FULL_NAME_MAX = NODE_SERVICE_ACCOUNT_ID_MAX - len(NODE_SERVICE_ACCOUNT_SUFFIX)


def node_service_account_id(cluster_name: str) -> str:
    """`<cluster>-nodes`, cut to 30 characters: the GKE nodes' least-privilege account."""
    return f"{cluster_name}{NODE_SERVICE_ACCOUNT_SUFFIX}"[:NODE_SERVICE_ACCOUNT_ID_MAX]


def dcn_network_name(cluster_name: str, index: int) -> str:
    """`<cluster>-net-1`, `<cluster>-net-2`, ... as the procedure names them (1-based)."""
    return f"{cluster_name}-net-{index + 1}"


def dcn_firewall_name(cluster_name: str, index: int) -> str:
    """The ingress rule inside each DCN network's subnet."""
    return f"{dcn_network_name(cluster_name, index)}-allow-internal"


def artifact_repository_id(cluster_name: str) -> str:
    """Named after the cluster, like the DCN networks, so two stacks in one project never share it."""
    return f"{cluster_name}-images"


def tpu_pool_name(slice_type: str, index: int) -> str:
    """`v6e-16-0`, `v6e-16-1`, ... as the procedure names them."""
    return f"{slice_type}-{index}"
