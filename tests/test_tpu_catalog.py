"""The TPU catalog: slice arithmetic, and agreement with Ray's own view of TPU topologies."""

import pytest
from ray._private.accelerators.tpu import VALID_TPU_TOPOLOGY
from ray.util.tpu import get_tpu_worker_resources

from domain.tpu_catalog import ACCELERATORS, accelerator


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


def test_unknown_topology_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"topology '3x3' is not offered for TPU v6e; valid topologies: 1x1, 2x2"):
        accelerator("v6e").shape("3x3")


def test_unknown_accelerator_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown TPU accelerator 'v9'; valid accelerators: v6e, v5e, v5p"):
        accelerator("v9")


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
