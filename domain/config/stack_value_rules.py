"""Rules on one infra setting's value beyond its field's own check (domain/stack_settings.py):
each needs more than the field has, or applies once that check has passed. The names the program
derives from clusterName and the stack's name, checked against the services that get them;
whether the Ray head fits a node of headMachineType; whether rayImage is a build of
trainer/Dockerfile. domain/config/settings.py calls them among its checks of several settings.
"""

from __future__ import annotations

from typing import Any

from domain.gcp import gcp_names, gke, resource_names
from domain.gcp.images import IMAGE_RULE, WORKER_IMAGE_NAME, is_worker_image, ray_version_of
from domain.gcp.machine_types import machine_size
from domain.ray import ray_head
from domain.ray.ray_version import MIN_RAY_VERSION_FOR_TOKEN_AUTH, RAY_VERSION, version_key
from domain.setting import Field
from domain.stack_settings import StackSettings

# A setting by its field, for messages to name it by (`_F.cluster_name`; mypy knows each).
_F = StackSettings


def key(field: Field[Any]) -> str:
    """A field's setting as the user types it (`minSlices`, `gcp:zone`), as messages name it."""
    return field.setting.key


# The label that records the stack on the cluster (domain/resources/gcp_resources.py).
STACK_LABEL = "maxtext-tpu-stack"


def derived_problem(key: str, value: str, derived: str, service: str, problems: list[str], fix: str) -> str:
    """A name the program builds from a setting, refused by the service that gets it."""
    return f"{key} = {value!r} makes {derived}, which {service} refuses: it {', '.join(problems)}; {fix}"


def stack_name_problems(stack: str) -> list[str]:
    stack_problems = gcp_names.label_value_problems(stack)
    if not stack_problems:
        return []
    return [
        f"the stack name {stack!r} becomes the cluster's label {STACK_LABEL}={stack}, which GKE "
        f"refuses: it {', '.join(stack_problems)}; use a stack named with {gcp_names.LABEL_VALUE_RULE}"
    ]


def head_machine_problems(machine_type: str, *, autoscales: bool) -> list[str]:
    """The Ray head pod's requests (with the autoscaler's sidecar on a stack that scales) against
    what GKE leaves pods on a node of `machine_type` (domain/gcp/gke.py); a size the name does not say
    is not checked (domain/gcp/machine_types.py)."""
    size = machine_size(machine_type)
    cpus, memory_gib = ray_head.head_pod_cpus(autoscales), ray_head.head_pod_memory_gib(autoscales)
    whose = "the head's and its autoscaler's requests" if autoscales else "the head's request"
    short = []
    if size.vcpus is not None and gke.allocatable_cpu(size.vcpus) < cpus:
        short.append(
            f"{gke.allocatable_cpu(size.vcpus):.2f} allocatable CPUs of its {size.vcpus:g} vCPUs for {whose} of {cpus:g}"
        )
    if size.memory_gib is not None and gke.allocatable_memory_gib(size.memory_gib) < memory_gib:
        short.append(
            f"{gke.allocatable_memory_gib(size.memory_gib):.2f} GiB of allocatable memory of its "
            f"{size.memory_gib:g} GiB for {whose} of {memory_gib:g} GiB"
        )
    if not short:
        return []
    return [
        f"{key(_F.head_machine_type)} = {machine_type!r} is too small for the Ray head: a GKE node of it offers "
        f"{' and '.join(short)} (GKE keeps the rest for the system), so the head pod would never schedule; use a "
        f"machine type with more, for example {_F.head_machine_type.setting.default} (the default)"
    ]


def ray_image_problems(stated: str, image: str) -> list[str]:
    """An image that cannot run this product's jobs. Its contents cannot be read before a node
    pulls it, so its name says whether it is a build of trainer/Dockerfile; Ray's own images
    also say which Ray they hold."""
    if is_worker_image(image):
        return []
    version = ray_version_of(image)
    if version is None:
        what = f"is not named as a build of trainer/Dockerfile (its image name is not {WORKER_IMAGE_NAME!r})"
    else:
        what = "is Ray's own image"
    mismatch = ""
    if version is not None and version != RAY_VERSION:
        too_old = (
            f"; {version} also predates token authentication, which the cluster turns on"
            if version_key(version) < version_key(MIN_RAY_VERSION_FOR_TOKEN_AUTH)
            else ""
        )
        mismatch = (
            f", and it holds Ray {version}, but the cluster runs Ray {RAY_VERSION} (the head, every worker and "
            f"the job client need the same Ray{too_old})"
        )
    return [
        f"{stated} {what}: only a build of trainer/Dockerfile has MaxText and this product's trainer "
        f"package, so every job would fail with `No module named ...` once the slices are up{mismatch}; use "
        f"{IMAGE_RULE}"
    ]


def cluster_derived_problems(cluster_name: str, *, dcn_networks: int, builds_image: bool) -> list[str]:
    """The names the program derives from clusterName (domain/gcp/resource_names.py), checked."""
    problems = []
    account_id = resource_names.node_service_account_id(cluster_name)
    account_problems = gcp_names.service_account_id_problems(account_id)
    if account_problems:
        problems.append(
            derived_problem(
                key(_F.cluster_name),
                cluster_name,
                f"the node service account id {account_id!r}",
                "IAM",
                account_problems,
                f"use at most {resource_names.NODE_SERVICE_ACCOUNT_FULL_NAME_MAX} characters, so that the id is "
                f"the whole name followed by {resource_names.NODE_SERVICE_ACCOUNT_SUFFIX}",
            )
        )
    for index in range(dcn_networks):
        for derived, kind in (
            (resource_names.dcn_network_name(cluster_name, index), "DCN network name"),
            (resource_names.dcn_firewall_name(cluster_name, index), "DCN firewall rule name"),
        ):
            derived_problems = gcp_names.compute_name_problems(derived)
            if derived_problems:
                problems.append(
                    derived_problem(
                        key(_F.cluster_name),
                        cluster_name,
                        f"the {kind} {derived!r}",
                        "Compute Engine",
                        derived_problems,
                        f"use a shorter {key(_F.cluster_name)}",
                    )
                )
    if builds_image:
        repository = resource_names.artifact_repository_id(cluster_name)
        repository_problems = gcp_names.artifact_repository_id_problems(repository)
        if repository_problems:
            problems.append(
                derived_problem(
                    key(_F.cluster_name),
                    cluster_name,
                    f"the image repository id {repository!r}",
                    "Artifact Registry",
                    repository_problems,
                    f"use a shorter {key(_F.cluster_name)}",
                )
            )
    return problems
