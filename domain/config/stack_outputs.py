"""The infra stack's outputs, each declared once: as a field of the frozen `InfraOutputs` record.

A field made with `output(...)` carries everything about one output: its name (the field's name
in camelCase, as `pulumi stack output` and a StackReference know it), its type, whether the
workloads project needs it, and what it holds. Everything else derives from that declaration:

- infra/program.py fills an `InfraOutputs` (a value for every field: one left out, or one that
  is not declared, is a TypeError before the program returns) and exports `exported(...)` of it;
- workloads/job_inputs.py reads the outputs `REQUIRED_BY_WORKLOADS` and `OPTIONAL_FOR_WORKLOADS`
  name;
- `markdown_table` is the README's list of outputs (`scripts/sync-settings` writes it;
  tests/test_stack_outputs.py fails when it drifts).

No output is a secret: the kubeconfig is exec-form (it runs the auth plugin; it holds no token),
and rayAuthSecret names the Secret that holds the Ray token, never the token.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from domain.ray.kuberay import RAY_AUTH_TOKEN_KEY

Kind = Literal["string", "integer", "number", "array", "object"]
# required: a stack without the output is refused before any job is submitted. optional: read
# when the infra stack has it; stacks deployed before it existed lack it, and the job does without
# (such a stack's cluster has no Ray token, and the workloads destroy cannot ask GKE about it).
Use = Literal["required", "optional"]

_METADATA_KEY = "stack_output"
_USE_TEXT = {"required": "required", "optional": "if present", None: "no"}


@dataclasses.dataclass(frozen=True)
class StackOutput:
    """One output of the infra stack."""

    kind: Kind
    description: str
    workloads: Use | None = None  # whether the workloads project reads it, and how
    field: str = ""  # the record's attribute, filled in by `outputs_of`

    @property
    def name(self) -> str:
        head, *rest = self.field.split("_")
        return head + "".join(part.capitalize() for part in rest)


def output(kind: Kind, description: str, *, workloads: Use | None = None) -> Any:
    """A field of an outputs record that declares one output (see `StackOutput`)."""
    return dataclasses.field(metadata={_METADATA_KEY: StackOutput(kind, description, workloads)})


# Each value is a plain value or a Pulumi Output of one (the domain does not import the SDK).
@dataclasses.dataclass(frozen=True, kw_only=True)
class InfraOutputs:
    """The infra stack's outputs, by their stable names: what the workloads project and users read."""

    cluster_name: Any = output("string", "GKE cluster name (the clusterName setting).")
    cluster_id: Any = output(
        "string",
        "The GKE API's name for the cluster, `projects/P/locations/L/clusters/N`; the workloads "
        "destroy asks GKE about the cluster by it.",
        workloads="optional",
    )
    cluster_location: Any = output(
        "string", "Where the cluster is: the zone of a Standard cluster, the region of an Autopilot one."
    )
    cluster_endpoint: Any = output("string", "Address of the cluster's Kubernetes API server.", workloads="required")
    cluster_ca_certificate: Any = output(
        "string", "The cluster's CA certificate (base64 PEM), to trust the API server.", workloads="required"
    )
    kubeconfig: Any = output(
        "object", "Exec-form kubeconfig of the cluster: it runs gke-gcloud-auth-plugin and holds no token."
    )
    mode: Any = output("string", "GKE mode: standard or autopilot.")
    namespace: Any = output(
        "string",
        "Kubernetes namespace of the RayCluster, the Secret of its Ray token and its pods' service account.",
        workloads="required",
    )
    service_account: Any = output(
        "string",
        "Kubernetes service account of the Ray pods (granted the checkpoint bucket; the serviceAccount setting).",
    )
    ray_cluster_name: Any = output("string", "Name of the RayCluster.")
    head_service_name: Any = output(
        "string",
        "The Ray head's Service, through which the workloads project reaches the Jobs API.",
        workloads="required",
    )
    dashboard_port: Any = output(
        "integer", "Port of the Ray dashboard and Jobs API on the head's Service.", workloads="required"
    )
    ray_auth_secret: Any = output(
        "string",
        f"Name of the Secret, in `namespace`, whose key `{RAY_AUTH_TOKEN_KEY}` holds the Ray token; "
        "never the token, which KubeRay generates in the cluster.",
        workloads="optional",
    )
    ray_image: Any = output("string", "The worker image the Ray pods run (rayImage, or the image the stack built).")
    bucket_name: Any = output("string", "Name of the checkpoint bucket.")
    checkpoint_root: Any = output(
        "string", "Where the Ray pods mount the checkpoint bucket: the jobs' checkpoint root.", workloads="required"
    )
    checkpoint_bucket_url: Any = output(
        "string",
        "The checkpoint bucket as a `gs://` URL; the workloads stack reads a run's data record there.",
        workloads="optional",
    )
    dataset_root: Any = output(
        "string",
        "Where the TPU workers see the dataset (datasetBucket, or its datasetPrefix folder), read-only: "
        "`/dataset`; null without datasetBucket.",
        workloads="optional",
    )
    dataset_uri: Any = output(
        "string",
        "The dataset mounted at datasetRoot as a `gs://` URL (`gs://BUCKET/PREFIX`); null without datasetBucket.",
        workloads="optional",
    )
    preset: Any = output(
        "string",
        "Training preset the slices are sized for; the workloads stack's preset when it sets none.",
        workloads="required",
    )
    accelerator: Any = output("string", "TPU generation of the slices.", workloads="required")
    # slices before topology: the workloads refusal names missing outputs in this order.
    slices: Any = output("integer", "Number of TPU slices.", workloads="required")
    topology: Any = output("string", "TPU topology of each slice.", workloads="required")
    hosts_per_slice: Any = output("integer", "TPU VMs per slice.")
    chips_per_host: Any = output("integer", "TPU chips per VM.")
    total_chips: Any = output("integer", "TPU chips over all slices.")
    capacity: Any = output(
        "array",
        "How TPU nodes are obtained, in order of preference (the capacity setting); a Hugging Face stream needs "
        "an acknowledgement on Spot.",
        workloads="optional",
    )
    min_slices: Any = output("integer", "TPU slices kept up while no job runs (the minSlices setting).")
    price_per_chip_hour_usd: Any = output(
        "number",
        "What one TPU chip costs an hour, in USD; null where no price is known (costBasis says why), "
        "and the job then has no dollar figure.",
        workloads="optional",
    )
    training_dollars_per_hour: Any = output(
        "number", "What an hour of training costs: the TPU chips of every slice; null without a price."
    )
    idle_dollars_per_hour: Any = output(
        "number", "What an idle hour costs: the TPU chips of the minSlices slices; null without a price."
    )
    idle_dollars_per_day: Any = output("number", "What an idle day costs; null without a price.")
    cost_basis: Any = output("string", "Where the price comes from, or why there is none.", workloads="optional")
    tpu_pools: Any = output("array", "Names of the TPU node pools (none in Autopilot).")
    dcn_networks: Any = output(
        "array", "Names of the extra DCN networks (none in Autopilot, nor for a TPU that uses none)."
    )


def outputs_of(cls: type = InfraOutputs) -> tuple[StackOutput, ...]:
    """The outputs a record declares, in declaration order."""
    return tuple(
        dataclasses.replace(field.metadata[_METADATA_KEY], field=field.name)
        for field in dataclasses.fields(cls)
        if _METADATA_KEY in field.metadata
    )


STACK_OUTPUTS = outputs_of()
REQUIRED_BY_WORKLOADS = tuple(entry.name for entry in STACK_OUTPUTS if entry.workloads == "required")
OPTIONAL_FOR_WORKLOADS = tuple(entry.name for entry in STACK_OUTPUTS if entry.workloads == "optional")


def exported(outputs: InfraOutputs) -> dict[str, Any]:
    """The stack outputs, by their names, in declaration order."""
    return {entry.name: getattr(outputs, entry.field) for entry in outputs_of(type(outputs))}


def markdown_table(cls: type = InfraOutputs) -> str:
    """The README's list of the infra stack's outputs."""
    lines = ["| output | type | read by workloads | what it holds |", "| --- | --- | --- | --- |"]
    for entry in outputs_of(cls):
        cells = (f"`{entry.name}`", entry.kind, _USE_TEXT[entry.workloads], entry.description)
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"
