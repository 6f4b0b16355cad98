"""The TPU catalog: slice arithmetic, and agreement with Ray's own view of TPU topologies."""

import pytest
from ray._private.accelerators.tpu import VALID_TPU_TOPOLOGY
from ray.util.tpu import get_tpu_worker_resources

from domain.tpu.capacity_choices import CAPACITY_CHOICES, FLEX_START, ON_DEMAND, RESERVATION, SPOT
from domain.tpu.tpu_catalog import ACCELERATORS, accelerator, offered_regions


def test_v6e_16_is_four_vms_of_four_chips():
    shape = accelerator("v6e").shape("4x4")
    assert (shape.chips, shape.vms, shape.chips_per_vm) == (16, 4, 4)
    assert shape.machine_type == "ct6e-standard-4t"
    assert shape.is_multi_host
    assert accelerator("v6e").slice_type("4x4") == "v6e-16"


@pytest.mark.parametrize(
    "name, topology, chips, vms",
    [("v6e", "8x16", 128, 32), ("v6e", "2x4", 8, 1), ("v5e", "4x8", 32, 8), ("v5p", "2x4x4", 32, 8)],
)
def test_slice_sizes(name, topology, chips, vms):
    shape = accelerator(name).shape(topology)
    assert (shape.chips, shape.vms) == (chips, vms)


def test_every_shape_divides_into_whole_vms():
    for acc in ACCELERATORS.values():
        for shape in acc.shapes.values():
            assert shape.chips % shape.chips_per_vm == 0, (acc.name, shape.topology)
            assert shape.vms >= 1


# The valid ones as the catalog lists them, in its order: a new topology or accelerator changes neither test.


def test_unknown_topology_names_the_valid_ones():
    valid = ", ".join(accelerator("v6e").shapes)
    with pytest.raises(ValueError) as caught:
        accelerator("v6e").shape("3x3")
    said = str(caught.value)
    assert "topology '3x3' is not offered for TPU v6e" in said and f"valid topologies: {valid}" in said, said
    assert "4x4" in valid.split(", ")


def test_unknown_accelerator_names_the_valid_ones():
    with pytest.raises(ValueError) as caught:
        accelerator("v9")
    said = str(caught.value)
    assert "unknown TPU accelerator 'v9'" in said and f"valid accelerators: {', '.join(ACCELERATORS)}" in said, said
    assert "v6e" in ACCELERATORS


_RAY_TPU_NAMES = {"v6e": "v6e", "v5e": "v5litepod", "v5p": "v5p"}


@pytest.mark.parametrize("name", list(ACCELERATORS))
def test_topologies_are_ones_ray_accepts(name):
    acc = accelerator(name)
    assert set(acc.shapes) <= VALID_TPU_TOPOLOGY[_RAY_TPU_NAMES[name]]


@pytest.mark.parametrize("name", list(ACCELERATORS))
@pytest.mark.parametrize("slices", [1, 2, 4])
def test_multi_host_workers_match_ray(name, slices):
    """One Ray worker per VM, each with that VM's chips: what Ray Train will ask the cluster for."""
    acc = accelerator(name)
    for shape in acc.shapes.values():
        if not shape.is_multi_host:
            continue
        workers, resources = get_tpu_worker_resources(
            shape.topology, acc.ray_accelerator_type, {"TPU": shape.chips_per_vm}, num_slices=slices
        )
        assert workers == shape.vms * slices, (name, shape.topology)
        assert resources["TPU"] == shape.chips_per_vm


def test_v6e_list_prices_per_capacity_choice():
    v6e = accelerator("v6e")
    assert v6e.chip_hour_price(ON_DEMAND, "us-east5").usd == 2.70
    assert v6e.chip_hour_price(SPOT, "us-east5").usd == 1.08
    assert v6e.chip_hour_price(SPOT, "us-central1").usd == 0.7803
    assert v6e.chip_hour_price(ON_DEMAND, "europe-west4").usd == 2.97
    # No stored source gives a flex-start price: none rather than a guess.
    assert v6e.chip_hour_price(FLEX_START, "us-east5") is None


def test_a_reservation_is_priced_as_on_demand_with_the_assumption_stated():
    price = accelerator("v6e").chip_hour_price(RESERVATION, "us-east5")
    assert (price.usd, price.capacity) == (2.70, RESERVATION)
    assert "on-demand list price" in price.assumption and "pricePerChipHour" in price.assumption
    assert accelerator("v6e").chip_hour_price(ON_DEMAND, "us-east5").assumption is None


def test_every_price_has_its_source_and_date():
    for acc in ACCELERATORS.values():
        for capacity, prices in acc.list_prices.items():
            assert capacity in CAPACITY_CHOICES and capacity != RESERVATION, (acc.name, capacity)
            assert prices.source and prices.read_on, (acc.name, capacity)
            assert all(0 < usd < 100 for usd in prices.by_region.values()), (acc.name, capacity)
            price = acc.chip_hour_price(capacity, next(iter(prices.by_region)))
            assert prices.source in price.source and prices.read_on in price.source


def test_spot_is_never_above_on_demand_where_both_are_listed():
    for acc in ACCELERATORS.values():
        spot = acc.list_prices.get(SPOT)
        for region, usd in spot.by_region.items() if spot else []:
            assert usd < acc.list_prices[ON_DEMAND].by_region[region], (acc.name, region)


def test_the_region_less_price_is_the_main_us_regions_on_demand_price():
    """`price_per_chip_hour_usd` (estimates without a region) says what the table says there."""
    for acc in ACCELERATORS.values():
        on_demand = acc.list_prices[ON_DEMAND].by_region
        main_us = [region for region in ("us-central1", "us-east1", "us-east5") if region in on_demand]
        assert main_us, acc.name
        assert {on_demand[region] for region in main_us} == {acc.price_per_chip_hour_usd}, acc.name


def test_v6e_prices_cover_the_us_and_europe_regions_it_is_offered_in():
    on_demand, spot = (accelerator("v6e").list_prices[c].by_region for c in (ON_DEMAND, SPOT))
    for region in offered_regions("v6e"):
        if region.startswith(("us-", "europe-")):
            assert region in on_demand and region in spot, region
