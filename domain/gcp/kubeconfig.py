"""A kubeconfig for a GKE cluster that holds no credential.

It uses the exec form with `gke-gcloud-auth-plugin`, which mints a short-lived token from the
operator's own gcloud login each time it is needed, so nothing secret lands in Pulumi state.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

AUTH_PLUGIN = "gke-gcloud-auth-plugin"


def ca_apart(kubeconfig: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The kubeconfig without its cluster's CA, and the CA as PEM text (None when it has none).

    The kubernetes client's loader writes `certificate-authority-data` to a temporary file that it
    removes only when the interpreter exits; its `Configuration.ca_cert_data` takes the CA in
    memory instead, so callers load the kubeconfig without it and hand it over that way."""
    stripped = copy.deepcopy(kubeconfig)
    ca = None
    for entry in stripped.get("clusters", []):
        data = entry.get("cluster", {}).pop("certificate-authority-data", None)
        if data is not None:
            ca = base64.b64decode(data).decode()
    return stripped, ca


def gke_kubeconfig(context_name: str, endpoint: str, ca_certificate_b64: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context_name,
                "cluster": {
                    "server": f"https://{endpoint}",
                    "certificate-authority-data": ca_certificate_b64,
                },
            }
        ],
        "users": [
            {
                "name": context_name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": AUTH_PLUGIN,
                        "installHint": (
                            "Install gke-gcloud-auth-plugin: `gcloud components install gke-gcloud-auth-plugin`"
                        ),
                        "provideClusterInfo": True,
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [{"name": context_name, "context": {"cluster": context_name, "user": context_name}}],
        "current-context": context_name,
    }
