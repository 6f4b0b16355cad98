"""One table of every TPU accelerator the project can provision; everything else derives from it.

Node pools, RayCluster shapes, Ray Train scaling and policies ask this table instead of
hard-coding "4x4", "ct6e-standard-4t" or "4 chips". Where its figures come from: docs/capacity.md,
"Where the catalog's figures come from".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from domain.tpu.capacity_choices import ON_DEMAND, RESERVATION, SPOT


@dataclass(frozen=True)
class SliceShape:
    """One topology of an accelerator: how many chips and VMs a slice of it has."""

    topology: str
    machine_type: str
    chips_per_vm: int

    @property
    def chips(self) -> int:
        return math.prod(int(dim) for dim in self.topology.split("x"))

    @property
    def vms(self) -> int:
        return self.chips // self.chips_per_vm

    @property
    def is_multi_host(self) -> bool:
        return self.vms > 1


@dataclass(frozen=True)
class ListPrices:
    """What one capacity choice of one generation costs per chip-hour, by region, as read from
    `source` on `read_on` (a date): list prices, before any discount a contract gives."""

    by_region: Mapping[str, float]
    source: str
    read_on: str


@dataclass(frozen=True)
class ChipHourPrice:
    """The price a stack's chips are costed at, and where it comes from (what outputs and
    messages say next to a dollar figure)."""

    usd: float
    capacity: str
    region: str
    source: str  # the catalog's source and date, or the pricePerChipHour setting
    assumption: str | None = None


# A reservation is billed under a contract the catalog cannot know.
RESERVATION_ASSUMPTION = (
    "a reservation is costed at the on-demand list price; set pricePerChipHour to the rate your contract gives"
)


@dataclass(frozen=True)
class Accelerator:
    """A TPU generation as GKE, Ray and MaxText name it, with its per-chip capacity."""

    name: str
    gke_accelerator: str  # node label cloud.google.com/gke-tpu-accelerator
    ray_accelerator_type: str  # Ray's accelerator_type resource, e.g. TPU-V6E
    maxtext_prefix: str  # MaxText compile_topology prefix, e.g. v6e -> v6e-16
    hbm_gb_per_chip: float
    # The compiler's own limit ("available HBM" in its OOM error): the runtime reserves some.
    usable_hbm_gib: float
    peak_bf16_tflops_per_chip: float
    # Extra VPCs for cross-slice (DCN) traffic; only ct6e was measured with DRANET.
    dcn_networks: int
    # The DCN line rate per chip: the host's NIC bandwidth over its chips (v5e 2 x 100 Gbps,
    # v6e 4 x 200 Gbps per 8-chip host; for v6e the same per chip as 2 x 200 Gbps per 4-chip
    # ct6e-standard-4t host). None: not known. What a cluster achieves of it is measured by
    # trainer/dcn_probe.py (docs/capacity.md, "Measuring the DCN rate on your cluster").
    dcn_bytes_per_second_per_chip: float | None
    shapes: Mapping[str, SliceShape]
    # One list for the workers and the fit check, so the compile sees what the job will run; the
    # pinned libtpu refuses unknown flags, and some known ones per platform.
    libtpu_flags: tuple[str, ...] = ()
    # `--name=value` (value lowercase) -> why the pinned libtpu refuses it on this generation.
    libtpu_refused_flags: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # A capacity choice or region missing here has no price the catalog can vouch for.
    list_prices: Mapping[str, ListPrices] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def price_per_chip_hour_usd(self) -> float:
        """The on-demand list price in REFERENCE_REGION, what an estimate without a region uses
        (a job's cost policy). A stack is costed by `chip_hour_price`, per capacity and region."""
        return self.list_prices[ON_DEMAND].by_region[REFERENCE_REGION]

    def chip_hour_price(self, capacity: str, region: str) -> ChipHourPrice | None:
        """What one chip-hour of `capacity` costs in `region` at list price; None when the
        catalog has no such price (the caller then shows no dollar figure, never a guess). A
        reservation is costed at the on-demand price (RESERVATION_ASSUMPTION)."""
        priced_as = ON_DEMAND if capacity == RESERVATION else capacity
        prices = self.list_prices.get(priced_as)
        if prices is None or region not in prices.by_region:
            return None
        return ChipHourPrice(
            usd=prices.by_region[region],
            capacity=capacity,
            region=region,
            source=f"{prices.source}, read {prices.read_on}",
            assumption=RESERVATION_ASSUMPTION if capacity == RESERVATION else None,
        )

    def shape(self, topology: str) -> SliceShape:
        try:
            return self.shapes[topology]
        except KeyError:
            raise ValueError(
                f"topology {topology!r} is not offered for TPU {self.name}; valid topologies: {', '.join(self.shapes)}"
            ) from None

    def libtpu_init_args(self) -> str:
        """LIBTPU_INIT_ARGS of this generation's workers: its flags, plus the NICs that carry
        cross-slice (megascale) traffic when the machine type attaches DCN networks."""
        flags = list(self.libtpu_flags)
        if self.dcn_networks:
            interfaces = [f"eth{index}" for index in range(1, self.dcn_networks + 1)] + ["lo"]
            flags.append(f"--megascale_grpc_interface_prefixes={','.join(interfaces)}")
        return " ".join(flags)

    def refused_libtpu_flags(self, init_args: str) -> list[tuple[str, str]]:
        """The flags of a LIBTPU_INIT_ARGS value this generation's libtpu refuses, each with
        why (a bare `--flag` is `--flag=true`, as libtpu reads a boolean flag)."""
        refused = []
        for token in init_args.split():
            name, _, value = token.partition("=")
            normalized = f"{name}={value.lower() if value else 'true'}"
            if normalized in self.libtpu_refused_flags:
                refused.append((token, self.libtpu_refused_flags[normalized]))
        return refused

    def slice_type(self, topology: str) -> str:
        """The slice name MaxText and Ray use, e.g. `v6e-16` for a 4x4 v6e slice."""
        return f"{self.maxtext_prefix}-{self.shape(topology).chips}"

    @property
    def zones(self) -> tuple[str, ...]:
        """Where this generation can be created (TPU_ZONES, below)."""
        return offered_zones(self.name)

    @property
    def regions(self) -> tuple[str, ...]:
        return offered_regions(self.name)


def _shapes(*entries: tuple[str, str, int]) -> Mapping[str, SliceShape]:
    return MappingProxyType({topology: SliceShape(topology, machine, chips) for topology, machine, chips in entries})


# The procedure's collective-overlap flags, less the one libtpu refuses on v6e (docs/procedure.md).
V6E_REFUSED_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true": (
            "libtpu 0.0.52 refuses it on v6e (continuation fusion for AllGather is supported on TPU v5e "
            "only), so the job would fail at its first step"
        )
    }
)
V6E_COLLECTIVE_OVERLAP = (
    "--xla_tpu_use_minor_sharding_for_major_trivial_input=true",
    "--xla_tpu_relayout_group_size_threshold_for_reduce_scatter=1",
    "--xla_tpu_assign_all_reduce_scatter_layout",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_overlap_compute_collective_tc=true",
    "--xla_enable_async_all_gather=true",
)
# Three flag groups of MaxText's published v6e recipes (docs/capacity.md, "The presets, tuned
# for speed"); the dense VMEM limit replaces the procedure's 122880 KiB.
DENSE_VMEM_LIMIT = ("--xla_tpu_scoped_vmem_limit_kib=98304",)
DATA_PARALLEL_OVERLAP = (
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true",
    "--xla_tpu_data_parallel_opt_different_sized_ops=true",
)
HOST_OFFLOAD = (
    "--xla_tpu_enable_all_experimental_scheduler_features=true",
    "--xla_tpu_enable_scheduler_memory_pressure_tracking=true",
    "--xla_tpu_host_transfer_overlap_limit=24",
    "--xla_tpu_aggressive_opt_barrier_removal=ENABLED",
    "--xla_lhs_prioritize_async_depth_over_stall=ENABLED",
    "--xla_tpu_enable_ag_backward_pipelining=true",
    "--xla_should_allow_loop_variant_parameter_in_chain=ENABLED",
    "--xla_should_add_loop_invariant_op_in_chain=ENABLED",
    "--xla_max_concurrent_host_send_recv=100",
    "--xla_tpu_scheduler_percent_shared_memory_limit=100",
    "--xla_latency_hiding_scheduler_rerun=2",
)
V6E_LIBTPU_FLAGS = (*DENSE_VMEM_LIMIT, *V6E_COLLECTIVE_OVERLAP, *DATA_PARALLEL_OVERLAP, *HOST_OFFLOAD)

# List prices: edit when Google's prices change. Source: docs/capacity.md, "List prices".
_SKYPILOT_GCP_PRICES = (
    "SkyPilot's catalog of Google Cloud prices, from the Cloud Billing Catalog API: https://github.com/"
    "skypilot-org/skypilot-catalog/blob/6f65ab58724c0a5b17dbb81ee124e7d7dee0d4a5/catalogs/v7/gcp/vms.csv"
)
_READ_ON = "2026-12-04"
REFERENCE_REGION = "us-central1"
V6E_PRICES: Mapping[str, ListPrices] = MappingProxyType(
    {
        ON_DEMAND: ListPrices(
            MappingProxyType(
                {
                    "us-central1": 2.70,
                    "us-east1": 2.70,
                    "us-east4": 2.70,
                    "us-east5": 2.70,
                    "us-south1": 2.70,
                    "us-west1": 2.70,
                    "europe-west4": 2.97,
                    "asia-southeast1": 2.97,
                    "asia-northeast1": 3.24,
                }
            ),
            _SKYPILOT_GCP_PRICES,
            _READ_ON,
        ),
        SPOT: ListPrices(
            MappingProxyType(
                {
                    "us-central1": 0.7803,
                    "us-east1": 0.7803,
                    "us-west1": 0.7803,
                    "us-east4": 0.918,
                    "us-east5": 1.08,
                    "us-south1": 1.89,
                    "europe-west4": 0.85833,
                    "asia-southeast1": 1.188,
                    "asia-northeast1": 1.296,
                }
            ),
            _SKYPILOT_GCP_PRICES,
            _READ_ON,
        ),
    }
)
V5P_PRICES: Mapping[str, ListPrices] = MappingProxyType(
    {
        ON_DEMAND: ListPrices(
            MappingProxyType(
                {
                    "us-central1": 4.20,
                    "us-east1": 4.20,
                    "us-east5": 4.20,
                    "us-south1": 4.779,
                    "europe-west4": 4.2525,
                    "europe-west1": 4.459455,
                }
            ),
            _SKYPILOT_GCP_PRICES,
            _READ_ON,
        ),
        SPOT: ListPrices(
            MappingProxyType(
                {
                    "us-central1": 1.6422,
                    "us-east1": 1.6422,
                    "us-east5": 1.68,
                    "us-south1": 2.3954,
                    "europe-west4": 1.22897,
                    "europe-west1": 1.78378,
                }
            ),
            _SKYPILOT_GCP_PRICES,
            _READ_ON,
        ),
    }
)
V5E_PRICES: Mapping[str, ListPrices] = MappingProxyType(
    {
        ON_DEMAND: ListPrices(
            MappingProxyType(dict.fromkeys(("us-central1", "us-south1", "us-west1", "us-west4", "us-east5"), 1.20)),
            "this catalog's earlier version (no source recorded; not re-checked)",
            "before 2026-12-04",
        ),
    }
)
_V6E_MULTI_HOST = "ct6e-standard-4t"
_V5E_MULTI_HOST = "ct5lp-hightpu-4t"
_V5P = "ct5p-hightpu-4t"

ACCELERATORS: Mapping[str, Accelerator] = MappingProxyType(
    {
        "v6e": Accelerator(
            name="v6e",
            gke_accelerator="tpu-v6e-slice",
            ray_accelerator_type="TPU-V6E",
            maxtext_prefix="v6e",
            hbm_gb_per_chip=32.0,
            usable_hbm_gib=31.24,
            peak_bf16_tflops_per_chip=918.0,
            dcn_networks=2,
            dcn_bytes_per_second_per_chip=4 * 200e9 / 8 / 8,  # bits to bytes, over 8 chips: 12.5e9
            libtpu_flags=V6E_LIBTPU_FLAGS,
            libtpu_refused_flags=V6E_REFUSED_FLAGS,
            list_prices=V6E_PRICES,
            shapes=_shapes(
                ("1x1", "ct6e-standard-1t", 1),
                ("2x2", "ct6e-standard-4t", 4),
                ("2x4", "ct6e-standard-8t", 8),
                ("4x4", _V6E_MULTI_HOST, 4),
                ("4x8", _V6E_MULTI_HOST, 4),
                ("8x8", _V6E_MULTI_HOST, 4),
                ("8x16", _V6E_MULTI_HOST, 4),
                ("16x16", _V6E_MULTI_HOST, 4),
            ),
        ),
        "v5e": Accelerator(
            name="v5e",
            gke_accelerator="tpu-v5-lite-podslice",
            ray_accelerator_type="TPU-V5LITEPOD",
            maxtext_prefix="v5e",
            hbm_gb_per_chip=16.0,
            usable_hbm_gib=15.62,  # assumed: v6e's reserved fraction (2.4%)
            peak_bf16_tflops_per_chip=197.0,
            dcn_networks=0,
            dcn_bytes_per_second_per_chip=2 * 100e9 / 8 / 8,  # bits to bytes, over 8 chips: 3.125e9
            list_prices=V5E_PRICES,
            shapes=_shapes(
                ("1x1", "ct5lp-hightpu-1t", 1),
                ("2x2", "ct5lp-hightpu-4t", 4),
                ("2x4", "ct5lp-hightpu-8t", 8),
                ("4x4", _V5E_MULTI_HOST, 4),
                ("4x8", _V5E_MULTI_HOST, 4),
                ("8x8", _V5E_MULTI_HOST, 4),
                ("8x16", _V5E_MULTI_HOST, 4),
                ("16x16", _V5E_MULTI_HOST, 4),
            ),
        ),
        "v5p": Accelerator(
            name="v5p",
            gke_accelerator="tpu-v5p-slice",
            ray_accelerator_type="TPU-V5P",
            maxtext_prefix="v5p",
            hbm_gb_per_chip=95.0,
            usable_hbm_gib=92.74,  # assumed: v6e's reserved fraction (2.4%)
            peak_bf16_tflops_per_chip=459.0,
            dcn_networks=0,
            dcn_bytes_per_second_per_chip=None,
            list_prices=V5P_PRICES,
            shapes=_shapes(
                ("2x2x1", _V5P, 4),
                ("2x2x2", _V5P, 4),
                ("2x2x4", _V5P, 4),
                ("2x4x4", _V5P, 4),
                ("4x4x4", _V5P, 4),
                ("4x4x8", _V5P, 4),
                ("4x8x8", _V5P, 4),
                ("8x8x8", _V5P, 4),
                ("8x8x16", _V5P, 4),
                ("8x16x16", _V5P, 4),
            ),
        ),
    }
)


def accelerator(name: str) -> Accelerator:
    """Looks up an accelerator by its short name (`v6e`, `v5e`, `v5p`)."""
    try:
        return ACCELERATORS[name]
    except KeyError:
        raise ValueError(f"unknown TPU accelerator {name!r}; valid accelerators: {', '.join(ACCELERATORS)}") from None


def accelerator_by_ray_type(ray_accelerator_type: str) -> Accelerator:
    """The accelerator Ray calls `TPU-V6E` (and so on), as a resolved job names it."""
    for candidate in ACCELERATORS.values():
        if candidate.ray_accelerator_type == ray_accelerator_type:
            return candidate
    valid = ", ".join(a.ray_accelerator_type for a in ACCELERATORS.values())
    raise ValueError(f"unknown Ray accelerator type {ray_accelerator_type!r}; valid: {valid}")


# Where each generation is offered: edit when Google's list changes. Each zone's note says how
# it was found (docs/capacity.md, "Where TPUs are offered"); an UNVERIFIED one needs checking.
TPU_ZONES: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "v6e": MappingProxyType(
            {
                "us-central1-b": "listed",
                "us-east1-d": "listed",
                "us-east5-a": "listed",
                "us-east5-b": "listed",
                "us-central1-ai1a": "listed (AI zone; the v6e table prints us-central1-ai1, the TPU7x one us-central1-ai1a)",
                "us-south1-ai1b": "listed (AI zone)",
                "europe-west4-a": "listed",
                "us-east5-c": "single-tenant",
                "us-east4-a": "single-tenant",
                "us-east4-b": "single-tenant",
                "us-west1-c": "single-tenant (no Spot quota)",
                "asia-northeast1-b": "UNVERIFIED",
                "southamerica-west1-a": "UNVERIFIED",
            }
        ),
        "v5p": MappingProxyType(
            {
                "us-central1-a": "listed",
                "us-east5-a": "listed",
                "us-east5-b": "single-tenant",
                "us-east5-c": "single-tenant",
                "us-south1-a": "single-tenant",
                "europe-west4-b": "UNVERIFIED",
            }
        ),
        "v5e": MappingProxyType(
            {
                "us-central1-a": "listed",
                "us-south1-a": "listed",
                "us-west1-c": "listed",
                "us-west4-a": "listed",
                "us-east5-a": "single-tenant",
                "us-east5-b": "single-tenant",
                "us-east5-c": "single-tenant",
                "europe-west4-b": "listed (older copy)",
                "asia-southeast1-b": "UNVERIFIED",
            }
        ),
    }
)
TPU_ZONES_SOURCE = (
    "https://cloud.google.com/tpu/docs/regions-zones (as read 2026-12-03; table TPU_ZONES in domain/tpu/tpu_catalog.py)"
)


# Only v6e is listed; a stack of another generation is not checked (docs/capacity.md).
FLEX_START_ZONES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"v6e": ("asia-northeast1-b", "us-east5-a", "us-east5-b")}
)
FLEX_START_ZONES_SOURCE = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/dws (as read 2026-12-04; FLEX_START_ZONES in "
    "domain/tpu/tpu_catalog.py)"
)


def zone_region(zone: str) -> str:
    """`us-east5-b` -> `us-east5`; AI zones too (`us-south1-ai1b` -> `us-south1`)."""
    return zone.rsplit("-", 1)[0]


def offered_zones(accelerator_name: str) -> tuple[str, ...]:
    """The zones where the generation can be created, as TPU_ZONES lists them."""
    return tuple(TPU_ZONES.get(accelerator_name, {}))


def single_tenant_zones(accelerator_name: str) -> tuple[str, ...]:
    """The zones TPU_ZONES marks single-tenant: capacity there comes from a reservation."""
    return tuple(zone for zone, note in TPU_ZONES.get(accelerator_name, {}).items() if note.startswith("single-tenant"))


def offered_regions(accelerator_name: str) -> tuple[str, ...]:
    """The regions with at least one such zone, in the table's order."""
    return tuple(dict.fromkeys(zone_region(zone) for zone in offered_zones(accelerator_name)))
