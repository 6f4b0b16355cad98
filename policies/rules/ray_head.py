"""The Ray head of a RayCluster, and anything exposing it: the capacity it runs on and who can
reach it. The head runs the Jobs API, which executes any command it is sent: it must never be
reachable from outside the cluster, and inside it only with Ray's auth token. A head lost to a
preemption ends the job.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs

from domain.resources.kuberay import MIN_RAY_VERSION_FOR_TOKEN_AUTH
from domain.tpu.gke_labels import FLEX_START_LABEL, SPOT_LABEL
from policies.rules.common import K8S_SERVICE, at, described, known, on, plain
from policies.rules.declare import Rules
from policies.rules.raycluster_props import ray_cluster

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()

PUBLIC_SERVICE_TYPES = ("LoadBalancer", "NodePort")


def _requires_label(pod_spec: dict[str, Any], label: str) -> bool:
    """Whether the pod can only run on nodes labelled `label`=true."""
    if at(pod_spec, "nodeSelector", label) == "true":
        return True
    terms = at(
        pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"
    )
    for term in terms if isinstance(terms, list) else []:
        expressions = at(term, "matchExpressions")
        for expression in expressions if isinstance(expressions, list) else []:
            values = at(expression, "values")
            if (
                at(expression, "key") == label
                and at(expression, "operator") == "In"
                and isinstance(values, list)
                and "true" in values
            ):
                return True
    return False


# Capacity the head must not run on, and what happens to the job there.
_HEAD_REFUSED_CAPACITY = {
    SPOT_LABEL: ("Spot nodes", "a preemption ends the whole job"),
    FLEX_START_LABEL: ("flex-start nodes", "the node ends after its maximum run duration, and the job with it"),
}


@RULES.resource(
    "raycluster-head-not-on-spot",
    EnforcementLevel.MANDATORY,
    "The Ray head is never scheduled on Spot or flex-start nodes.",
)
@on(ray_cluster)
def head_not_on_spot(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """A preempted head (or one on a flex-start node at its end) ends the job and every worker's
    progress since the last checkpoint."""
    head = at(props, "spec", "headGroupSpec", "template", "spec")
    if not isinstance(head, dict):
        return
    for node_label, (nodes, effect) in _HEAD_REFUSED_CAPACITY.items():
        if _requires_label(head, node_label):
            report_violation(
                f"{label} schedules its head on {nodes} ({node_label}=true): {effect} while the "
                "TPU slices keep billing. Remove that node selector from the head and keep it on "
                "the on-demand CPU pool.",
                args.urn,
            )


@RULES.resource(
    "raycluster-head-service-cluster-ip",
    EnforcementLevel.MANDATORY,
    "The Ray head service is ClusterIP only.",
)
@on(ray_cluster)
def head_service_cluster_ip(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """The head's service carries the dashboard and the Jobs API (remote code execution)."""
    head = at(props, "spec", "headGroupSpec")
    for path in (("serviceType",), ("headService", "spec", "type")):
        service_type = at(head, *path)
        if known(service_type) and service_type != "ClusterIP":
            report_violation(
                f"{label} exposes its head service as {service_type} "
                f"(headGroupSpec.{'.'.join(path)}): the dashboard and the Jobs API, which runs "
                "any command it is sent, would be reachable from outside the cluster. Set it to "
                "ClusterIP and reach the dashboard with `kubectl port-forward`.",
                args.urn,
            )


def _auth_problem(spec: dict[str, Any]) -> str | None:
    """What leaves a known RayCluster spec without token authentication, or None when it has it
    or cannot be told yet (preview). An absent authOptions, or one without a mode, is decided:
    KubeRay reads it as mode "disabled"."""
    options = spec.get("authOptions")
    if options is None:
        return "spec.authOptions is not set, which KubeRay reads as mode 'disabled'"
    if not isinstance(options, dict):
        return None  # not known yet
    mode = options.get("mode")
    if mode is None:
        return "spec.authOptions has no mode, which KubeRay reads as 'disabled'"
    if not known(mode) or mode == "token":
        return None
    return f"spec.authOptions.mode is {mode!r}"


@RULES.resource(
    "raycluster-token-auth",
    EnforcementLevel.MANDATORY,
    "The RayCluster has Ray token authentication on (authOptions.mode token).",
)
@on(ray_cluster)
def token_authentication(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Without a token the Jobs API runs any command that any pod in the cluster sends it."""
    spec = at(props, "spec")
    problem = _auth_problem(spec) if isinstance(spec, dict) else None
    if problem:
        report_violation(
            f"{label} runs Ray without token authentication ({problem}): the Jobs API on its "
            "head runs any command that any pod in the cluster sends it. Set "
            'spec.authOptions.mode to "token" (KubeRay then generates the token into a Secret '
            "named after the cluster) and spec.rayVersion to the image's Ray version, "
            f"{MIN_RAY_VERSION_FOR_TOKEN_AUTH} or later, which KubeRay requires for it.",
            args.urn,
        )


def _selects_ray_head(selector: dict[str, Any]) -> bool:
    node_type = selector.get("ray.io/node-type")
    identifier = selector.get("ray.io/identifier")
    return (
        node_type == "head"
        or (isinstance(identifier, str) and identifier.endswith("-head"))
        or ("ray.io/cluster" in selector and "ray.io/node-type" not in selector)
    )


@RULES.resource(
    "ray-head-service-not-public",
    EnforcementLevel.MANDATORY,
    "No LoadBalancer or NodePort Service selects the Ray head.",
)
def head_service_not_public(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Any other Service in front of the head pod exposes the same Jobs API."""
    if args.resource_type != K8S_SERVICE:
        return
    props = plain(args.props)
    service_type, selector = at(props, "spec", "type"), at(props, "spec", "selector")
    if service_type in PUBLIC_SERVICE_TYPES and isinstance(selector, dict) and _selects_ray_head(selector):
        report_violation(
            f"{described('Kubernetes Service', args.name, props)} is a {service_type} in front "
            "of the Ray head: the dashboard and the Jobs API, which runs any command it is sent, "
            "would be reachable from outside the cluster. Make it a ClusterIP service and reach "
            "the dashboard with `kubectl port-forward`.",
            args.urn,
        )
