"""A kubeconfig for a GKE cluster that holds no credential.

It uses the exec form with `gke-gcloud-auth-plugin`, which mints a short-lived token from the
operator's own gcloud login each time it is needed, so nothing secret lands in Pulumi state.
"""

from __future__ import annotations

from typing import Any

AUTH_PLUGIN = "gke-gcloud-auth-plugin"


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
