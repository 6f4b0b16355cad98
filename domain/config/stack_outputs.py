"""The infra stack's outputs, each declared once: as a field of the frozen `InfraOutputs` record.

A field made with `output(...)` carries everything about one output: its name (the field's name
in camelCase, as `pulumi stack output` and a StackReference know it), its type, whether the
workloads project reads it, and what it holds. Everything else derives from that declaration:

- infra/program.py fills an `InfraOutputs` (a value for every field: one left out, or one that
  is not declared, is a TypeError before the program returns) and exports `exported(...)` of it;
- the workloads project reads the fields of `WorkloadsOutputs` (the base record: every output it
  reads, the rest are InfraOutputs' own) into a `ClusterOutputs`, in workloads/infra_outputs.py;
  a field that may be None is read when present, any other is required;
- `markdown_table` is the reference's list of outputs (`scripts/sync-settings` writes it;
  tests/test_stack_outputs.py fails when it drifts).

The records are generic in how each kind of value is held, so that mypy checks both sides: a
plain value when read, a plain value or a Pulumi Output of one when exported (`Exported`).

No output is a secret: the kubeconfig is exec-form (it runs the auth plugin; it holds no token),
and rayAuthSecret names the Secret that holds the Ray token, never the token.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Awaitable
from typing import Any, Generic, Literal, Protocol, TypeVar

from domain.resources.kuberay import RAY_AUTH_TOKEN_KEY
from domain.setting import camel_case

Kind = Literal["string", "integer", "number", "array", "object"]

# How each kind of value is held (see the module's docstring).
S = TypeVar("S")
I = TypeVar("I")  # noqa: E741
N = TypeVar("N")
L = TypeVar("L")
D = TypeVar("D")
_KINDS: dict[object, Kind] = {S: "string", I: "integer", N: "number", L: "array", D: "object"}

_T_co = TypeVar("_T_co", covariant=True)


class Deferred(Protocol[_T_co]):
    """A value known later: what a Pulumi Output is to code that does not import the SDK."""

    def future(self, with_unknowns: bool = ...) -> Awaitable[_T_co | None]: ...


type Exported[V] = V | Deferred[V]

_METADATA_KEY = "stack_output"
_USE_TEXT = {"required": "required", "optional": "if present", None: "no"}


@dataclasses.dataclass(frozen=True)
class StackOutput:
    """One output of the infra stack."""

    kind: Kind
    description: str
    workloads: Literal["required", "optional"] | None = None  # whether the workloads project reads it, and how
    minimum: int | None = None  # an integer's lowest valid value, checked where it is read
    field: str = ""

    @property
    def name(self) -> str:
        return camel_case(self.field)


def output(description: str, *, minimum: int | None = None) -> Any:
    """A field of an outputs record that declares one output (see `StackOutput`)."""
    return dataclasses.field(metadata={_METADATA_KEY: (description, minimum)})


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadsOutputs(Generic[S, I, N, L, D]):  # noqa: UP046 (outputs_of reads the kinds from these TypeVars)
    """The outputs the workloads project reads: a field that may be None is read when present
    (stacks deployed before it existed lack it, and the job does without: such a stack's cluster
    has no Ray token, and the workloads destroy cannot ask GKE about it); any other is required,
    and a stack without it is refused before any job is submitted."""

    cluster_id: S | None = output(
        "The GKE API's name for the cluster, `projects/P/locations/L/clusters/N`; the workloads "
        "destroy asks GKE about the cluster by it."
    )
    cluster_endpoint: S = output("Address of the cluster's Kubernetes API server.")
    cluster_ca_certificate: S = output("The cluster's CA certificate (base64 PEM), to trust the API server.")
    namespace: S = output(
        "Kubernetes namespace of the RayCluster, the Secret of its Ray token and its pods' service account."
    )
    head_service_name: S = output("The Ray head's Service, through which the workloads project reaches the Jobs API.")
    dashboard_port: I = output("Port of the Ray dashboard and Jobs API on the head's Service.", minimum=1)
    ray_auth_secret: S | None = output(
        f"Name of the Secret, in `namespace`, whose key `{RAY_AUTH_TOKEN_KEY}` holds the Ray token; "
        "never the token, which KubeRay generates in the cluster."
    )
    checkpoint_root: S = output("Where the Ray pods mount the checkpoint bucket: the jobs' checkpoint root.")
    checkpoint_bucket_url: S | None = output(
        "The checkpoint bucket as a `gs://` URL; the workloads stack reads a run's data record there and "
        "uploads a run's TensorBoard scalars there."
    )
    dataset_root: S | None = output(
        "Where the TPU workers see the dataset (datasetBucket, or its datasetPrefix folder), read-only: "
        "`/dataset`; null without datasetBucket."
    )
    dataset_uri: S | None = output(
        "The dataset mounted at datasetRoot as a `gs://` URL (`gs://BUCKET/PREFIX`); null without datasetBucket."
    )
    preset: S = output("Training preset the slices are sized for; the workloads stack's preset when it sets none.")
    accelerator: S = output("TPU generation of the slices.")
    # slices before topology: the workloads refusal names missing outputs in this order.
    slices: I = output("Number of TPU slices.", minimum=1)
    topology: S = output("TPU topology of each slice.")
    capacity: L | None = output(
        "How TPU nodes are obtained, in order of preference (the capacity setting); a Hugging Face stream needs "
        "an acknowledgement on Spot."
    )
    price_per_chip_hour_usd: N | None = output(
        "What one TPU chip costs an hour, in USD; null where no price is known (costBasis says why), "
        "and the job then has no dollar figure."
    )
    cost_basis: S | None = output("Where the price comes from, or why there is none.")


# What the workloads project knows of the cluster, once read.
type ClusterOutputs = WorkloadsOutputs[str, int, float, list[str], dict[str, Any]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class InfraOutputs(WorkloadsOutputs[S, I, N, L, D]):
    """The infra stack's outputs, by their stable names: those the workloads project reads, and
    these, which users read."""

    cluster_name: S = output("GKE cluster name (the clusterName setting).")
    cluster_location: S = output(
        "Where the cluster is: the zone of a Standard cluster, the region of an Autopilot one."
    )
    kubeconfig: D = output("Exec-form kubeconfig of the cluster: it runs gke-gcloud-auth-plugin and holds no token.")
    mode: S = output("GKE mode: standard or autopilot.")
    service_account: S = output(
        "Kubernetes service account of the Ray pods (granted the checkpoint bucket; the serviceAccount setting)."
    )
    ray_cluster_name: S = output("Name of the RayCluster.")
    ray_image: S = output("The worker image the Ray pods run (rayImage, or the image the stack built).")
    bucket_name: S = output("Name of the checkpoint bucket.")
    hosts_per_slice: I = output("TPU VMs per slice.")
    chips_per_host: I = output("TPU chips per VM.")
    total_chips: I = output("TPU chips over all slices.")
    min_slices: I = output("TPU slices kept up while no job runs (the minSlices setting).")
    training_dollars_per_hour: N | None = output(
        "What an hour of training costs: the TPU chips of every slice; null without a price."
    )
    idle_dollars_per_hour: N | None = output(
        "What an idle hour costs: the TPU chips of the minSlices slices; null without a price."
    )
    idle_dollars_per_day: N | None = output("What an idle day costs; null without a price.")
    tpu_pools: L = output("Names of the TPU node pools (none in Autopilot).")
    dcn_networks: L = output("Names of the extra DCN networks (none in Autopilot, nor for a TPU that uses none).")


# The record infra/program.py fills.
type ExportedOutputs = InfraOutputs[
    Exported[str], Exported[int], Exported[float], Exported[list[str]], Exported[dict[str, Any]]
]


def outputs_of(cls: type = InfraOutputs) -> tuple[StackOutput, ...]:
    """The outputs a record declares, in declaration order: each one's kind from its type, and
    how the workloads project reads it from whether it is a field of WorkloadsOutputs that may
    be None."""
    hints = typing.get_type_hints(cls, globalns=vars(sys.modules[__name__]))
    read = {field.name for field in dataclasses.fields(WorkloadsOutputs)}
    entries = []
    for field in dataclasses.fields(cls):
        if _METADATA_KEY not in field.metadata:
            continue
        description, minimum = field.metadata[_METADATA_KEY]
        held = set(typing.get_args(hints[field.name])) if _is_union(hints[field.name]) else {hints[field.name]}
        nullable = type(None) in held
        (kind,) = (_KINDS[arg] for arg in held if arg in _KINDS)
        use: Literal["required", "optional"] | None = None
        if field.name in read:
            use = "optional" if nullable else "required"
        entries.append(StackOutput(kind, description, use, minimum, field.name))
    return tuple(entries)


def _is_union(hint: object) -> bool:
    return isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union


STACK_OUTPUTS = outputs_of()
REQUIRED_BY_WORKLOADS = tuple(entry.name for entry in STACK_OUTPUTS if entry.workloads == "required")
OPTIONAL_FOR_WORKLOADS = tuple(entry.name for entry in STACK_OUTPUTS if entry.workloads == "optional")
READ_BY_WORKLOADS = tuple(entry for entry in STACK_OUTPUTS if entry.workloads is not None)


def exported(outputs: InfraOutputs[Any, Any, Any, Any, Any]) -> dict[str, Any]:
    """The stack outputs, by their names, in declaration order."""
    return {entry.name: getattr(outputs, entry.field) for entry in outputs_of(type(outputs))}


def markdown_table(cls: type = InfraOutputs) -> str:
    """The reference's list of the infra stack's outputs."""
    lines = ["| output | type | read by workloads | what it holds |", "| --- | --- | --- | --- |"]
    for entry in outputs_of(cls):
        cells = (f"`{entry.name}`", entry.kind, _USE_TEXT[entry.workloads], entry.description)
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"
