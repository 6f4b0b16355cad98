"""What every rule shares: reading properties that may not be known yet, naming resources in
messages, the TPU catalog seen from resource properties, and a stack-wide view for rules that
relate resources to each other (how a rule is declared: `policies.rules.declare`).

Unknown values. During `pulumi preview` an input that depends on another resource's output is not
known yet: the SDK hands it to the pack as an unknown marker (reading it through `args.props`
raises `UnknownValueError`), and stack policies may see such outputs as absent or None. `plain`
turns every one of those into `UNKNOWN`, and `at` returns `UNKNOWN` for a path that is missing,
None or unknown. A rule that meets `UNKNOWN` where it needs a value cannot decide, so it reports
nothing: no crash and no guessed violation. The price is that a property left unset is never
read as its provider default; the shipped programs set every property these rules read, and
their tests pin those values. One exception: a RayCluster's `authOptions` (or its `mode`) left
out is read as KubeRay reads it, authentication disabled, because an omission there leaves the
Jobs API open (`ray_head.token_authentication`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import PolicyResource, ReportViolation, ResourceValidationArgs
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
)

from domain.stack_identity import integral
from domain.tpu.gke_labels import TPU_ACCELERATOR_LABEL, TPU_RESOURCE, TPU_TOPOLOGY_LABEL
from domain.tpu.tpu_catalog import ACCELERATORS, Accelerator, SliceShape

NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
BUCKET = "gcp:storage/bucket:Bucket"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
K8S_SERVICE = "kubernetes:core/v1:Service"


_UNKNOWN_MARKERS = frozenset(
    {
        UNKNOWN_BOOLEAN_VALUE,
        UNKNOWN_NUMBER_VALUE,
        UNKNOWN_STRING_VALUE,
        UNKNOWN_ARRAY_VALUE,
        UNKNOWN_ASSET_VALUE,
        UNKNOWN_ARCHIVE_VALUE,
        UNKNOWN_OBJECT_VALUE,
    }
)


class _Unknown:
    """A value the pack cannot know now: missing, None, or not computed until the update.

    One instance, even through `copy.deepcopy`, so `value is UNKNOWN` always works.
    """

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


def plain(value: Any) -> Any:
    """A plain copy of policy props (the SDK's unknown-checking proxies included), with every
    unknown marker replaced by UNKNOWN, so rules can walk it without catching exceptions."""
    if isinstance(value, str):
        return UNKNOWN if value in _UNKNOWN_MARKERS else value
    if isinstance(value, Mapping):
        return {key: _item(value, key) for key in value}
    if isinstance(value, Sequence):
        return [_item(value, index) for index in range(len(value))]
    return value


def _item(container: Any, key: Any) -> Any:
    try:
        return plain(container[key])
    except UnknownValueError:
        return UNKNOWN


def at(node: Any, *path: str | int) -> Any:
    """The value at `path` (keys and list indexes), or UNKNOWN if any step is missing or unknown.

    Keys are separate arguments because Kubernetes labels contain dots.
    """
    for step in path:
        if isinstance(step, int):
            if not isinstance(node, list) or not -len(node) <= step < len(node):
                return UNKNOWN
            node = node[step]
        else:
            if not isinstance(node, dict) or step not in node:
                return UNKNOWN
            node = node[step]
        if node is None:
            return UNKNOWN
    return node


def known(*values: Any) -> bool:
    return all(value is not UNKNOWN and value is not None for value in values)


def whole_number(value: Any) -> Any:
    """An integer from what the engine sends (a whole float is one, as `integral` reads it;
    Kubernetes quantities arrive as strings), or UNKNOWN when it is not one."""
    if isinstance(value, bool) or not known(value):
        return UNKNOWN
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    number = integral(value)
    return number if isinstance(number, int) else UNKNOWN


def described(kind: str, name: str, props: dict[str, Any]) -> str:
    """`TPU node pool 'tpu-0' (v6e-16-0)`: the Pulumi name, and the cloud name when it differs."""
    cloud = at(props, "name")
    if not known(cloud):
        cloud = at(props, "metadata", "name")
    suffix = f" ({cloud})" if isinstance(cloud, str) and cloud != name else ""
    return f"{kind} '{name}'{suffix}"


# --- The TPU catalog, seen from GKE resources -----------------------------------------------


def accelerators_for_machine(machine_type: Any) -> list[Accelerator]:
    """Accelerators offering this GKE machine type; empty for a machine that is not a TPU."""
    return [
        candidate
        for candidate in ACCELERATORS.values()
        if any(shape.machine_type == machine_type for shape in candidate.shapes.values())
    ]


def accelerator_for_label(gke_accelerator: Any) -> Accelerator | None:
    """The accelerator whose `cloud.google.com/gke-tpu-accelerator` node label this is."""
    for candidate in ACCELERATORS.values():
        if candidate.gke_accelerator == gke_accelerator:
            return candidate
    return None


@dataclass(frozen=True)
class PoolSlice:
    """What a TPU node pool provides, as far as its properties say."""

    accelerator: Accelerator
    machine_type: str
    chips_per_vm: int  # the same for every topology a machine type serves
    topology: Any  # UNKNOWN when the pool names none (or it is not known yet)
    shape: SliceShape | None  # None when the topology is unknown or not offered
    node_count: Any  # UNKNOWN when not known


def pool_slice(props: dict[str, Any]) -> PoolSlice | None:
    """The accelerator and slice shape of a TPU node pool; None for any other pool."""
    machine = at(props, "nodeConfig", "machineType")
    candidates = accelerators_for_machine(machine)
    if not candidates:
        return None
    topology = at(props, "placementPolicy", "tpuTopology")
    offered = [c for c in candidates if isinstance(topology, str) and topology in c.shapes]
    accelerator = (offered or candidates)[0]
    shape = accelerator.shapes[topology] if offered else None
    count = whole_number(at(props, "nodeCount"))
    if not known(count):
        count = whole_number(at(props, "initialNodeCount"))
    per_vm = next(s.chips_per_vm for s in accelerator.shapes.values() if s.machine_type == machine)
    return PoolSlice(accelerator, machine, per_vm, topology, shape, count)


# --- RayCluster worker groups ---------------------------------------------------------------


@dataclass(frozen=True)
class TpuWorkerGroup:
    """A RayCluster worker group that runs on TPU nodes (its pods select a TPU accelerator)."""

    name: str
    spec: dict[str, Any]
    accelerator_label: Any
    topology: Any

    @property
    def accelerator(self) -> Accelerator | None:
        return accelerator_for_label(self.accelerator_label)

    @property
    def shape(self) -> SliceShape | None:
        accelerator = self.accelerator
        if accelerator is None or not isinstance(self.topology, str):
            return None
        return accelerator.shapes.get(self.topology)

    @property
    def containers(self) -> list[dict[str, Any]]:
        found = at(self.spec, "template", "spec", "containers")
        return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def tpu_worker_groups(props: dict[str, Any]) -> list[TpuWorkerGroup]:
    groups = at(props, "spec", "workerGroupSpecs")
    if not isinstance(groups, list):
        return []
    found = []
    for index, group in enumerate(groups):
        selector = at(group, "template", "spec", "nodeSelector")
        if not isinstance(selector, dict) or TPU_ACCELERATOR_LABEL not in selector:
            continue
        name = at(group, "groupName")
        found.append(
            TpuWorkerGroup(
                name=name if isinstance(name, str) else f"#{index}",
                spec=group,
                accelerator_label=at(selector, TPU_ACCELERATOR_LABEL),
                topology=at(selector, TPU_TOPOLOGY_LABEL),
            )
        )
    return found


def container_tpu_limit(container: dict[str, Any]) -> Any:
    return whole_number(at(container, "resources", "limits", TPU_RESOURCE))


def requests_tpu(container: dict[str, Any]) -> bool | None:
    """Whether a container asks for TPU chips (a limit or a request); None when its resources
    are not known."""
    resources = at(container, "resources")
    if not isinstance(resources, dict):
        return None
    kinds = [resources.get(kind) for kind in ("limits", "requests")]
    if UNKNOWN in kinds:
        return None
    return any(isinstance(kind, dict) and TPU_RESOURCE in kind for kind in kinds)


# --- The stack as a whole -------------------------------------------------------------------


@dataclass(frozen=True)
class StackResource:
    resource: PolicyResource

    @functools.cached_property
    def props(self) -> dict[str, Any]:
        """Plain props, made on first use: a stack rule reads a few types of the stack's
        resources, and converting every resource for each rule was most of its time."""
        return plain(self.resource.props)

    @property
    def name(self) -> str:
        return self.resource.name

    @property
    def urn(self) -> str:
        return self.resource.urn


class StackView:
    """Every resource of a stack with plain props, and how their references resolve."""

    def __init__(self, resources: Sequence[PolicyResource]):
        self.resources = [StackResource(r) for r in resources]

    def of_type(self, resource_type: str) -> list[StackResource]:
        return [r for r in self.resources if r.resource.resource_type == resource_type]

    def tpu_pools(self) -> list[tuple[StackResource, PoolSlice]]:
        """The node pools known to be TPU pools (see `pools_decided`)."""
        pools = []
        for resource in self.of_type(NODE_POOL):
            found = pool_slice(resource.props)
            if found is not None:
                pools.append((resource, found))
        return pools

    def pools_decided(self) -> bool:
        """Whether every node pool's machine type is known, so `tpu_pools` is the whole list
        rather than a part of it (a pool of unknown machine type may be a TPU slice)."""
        return all(known(at(pool.props, "nodeConfig", "machineType")) for pool in self.of_type(NODE_POOL))

    def resolve(
        self, holder: StackResource, prop: str, reference: Any, candidates: list[StackResource]
    ) -> StackResource | None:
        """The candidate `reference` (a property of `holder`) points to, or None if it cannot
        be told: by value first (a name, a `.../networks/NAME` path, an id or self link), then
        by the engine's property dependencies, then by plain dependencies, each only when it
        singles out one candidate."""
        if isinstance(reference, str):
            for candidate in candidates:
                identities = [at(candidate.props, key) for key in ("id", "selfLink")]
                name = at(candidate.props, "name")
                if reference in identities or (isinstance(name, str) and reference.rsplit("/", 1)[-1] == name):
                    return candidate
        by_urn = {candidate.urn: candidate for candidate in candidates}
        for dependencies in (
            (holder.resource.property_dependencies or {}).get(prop, []),
            holder.resource.dependencies,
        ):
            matches = {d.urn for d in dependencies if d.urn in by_urn}
            if len(matches) == 1:
                return by_urn[matches.pop()]
        return None


# A resource rule's check of what `select` finds in one resource (a tuple, passed first), before
# the usual arguments; a resource where it finds nothing (another type) is let through.
Check = Callable[..., None]
Rule = Callable[[ResourceValidationArgs, ReportViolation], None]


def on(select: Callable[[ResourceValidationArgs], tuple[Any, ...] | None]) -> Callable[[Check], Rule]:
    """Makes `check(*found, args, report_violation)` a rule of the resources `select` finds."""

    def decorate(check: Check) -> Rule:
        @functools.wraps(check)
        def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
            found = select(args)
            if found is not None:
                check(*found, args, report_violation)

        return validate

    return decorate
