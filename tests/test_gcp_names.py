"""Google Cloud's naming rules (domain/gcp/gcp_names.py), image references (domain/gcp/images.py), the
names the program derives (domain/gcp/resource_names.py) and the TPU zone table: exact answers on
the edges of each rule."""

from __future__ import annotations

import pytest

from domain.gcp import gcp_names, resource_names
from domain.gcp.images import image_reference_problems
from domain.tpu.tpu_catalog import ACCELERATORS, TPU_ZONES, accelerator, offered_regions, offered_zones, zone_region

NOT_LOWER = "has characters other than lowercase letters, digits and '-'"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("a", []),
        ("default", []),
        ("a" * 63, []),
        ("net-1", []),
        ("a" * 64, ["is 64 characters long (at most 63)"]),
        ("", ["is empty"]),
        ("My-Net", ["has uppercase letters"]),
        ("net_1", [f"{NOT_LOWER}: '_'"]),
        ("1net", ["does not start with a letter"]),
        ("-net", ["does not start with a letter"]),
        ("net-", ["ends with '-'"]),
        ("a b.c", [f"{NOT_LOWER}: ' ' '.'"]),
    ],
)
def test_compute_name(name, expected):
    assert gcp_names.compute_name_problems(name) == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        ("my-v6e-reservation", []),
        ("projects/owner-project/reservations/shared-res", []),
        ("My_Res", ["has uppercase letters", f"{NOT_LOWER}: '_'"]),
        ("res-", ["ends with '-'"]),
        (
            "projects/Owner/reservations/res-",
            [
                "names project 'Owner', which looks like a project's display name (it has spaces or uppercase letters), not its ID",
                "names reservation 'res-', which ends with '-'",
            ],
        ),
        (
            "zones/us-east5-b/reservations/res",
            ["is a path; give the reservation's name, or projects/PROJECT_ID/reservations/NAME for a shared one"],
        ),
        (
            "projects/p/reservations/",
            ["names project 'p', which is 1 characters long (at least 6)", "names reservation '', which is empty"],
        ),
    ],
)
def test_reservation(value, expected):
    assert gcp_names.reservation_problems(value) == expected


@pytest.mark.parametrize(
    "name, expected",
    [
        ("default", []),
        ("vpc-" + "a" * 59, []),
        ("projects/p/global/networks/vpc", ["is a path or URL; give the bare network name"]),
        (
            "https://www.googleapis.com/compute/v1/projects/p/global/networks/vpc",
            ["is a path or URL; give the bare network name"],
        ),
        ("VPC", ["has uppercase letters"]),
        ("vpc-" + "a" * 60, ["is 64 characters long (at most 63)"]),
    ],
)
def test_network_name(name, expected):
    assert gcp_names.network_name_problems(name) == expected


@pytest.mark.parametrize(
    "name, expected",
    [
        ("maxtext-tpu", []),
        ("a" * 40, []),
        ("a" * 41, ["is 41 characters long (at most 40)"]),
        ("tpu-cluster-", ["ends with '-'"]),
        ("2cluster", ["does not start with a letter"]),
    ],
)
def test_gke_cluster_name(name, expected):
    assert gcp_names.gke_cluster_name_problems(name) == expected


@pytest.mark.parametrize(
    "name, expected",
    [
        ("v6e-16-0", []),
        ("v6e-256-63", []),
        ("ray-head-pool", []),
        ("p" * 40, []),
        ("p" * 41, ["is 41 characters long (at most 40)"]),
        ("6e-16-0", ["does not start with a letter"]),
    ],
)
def test_node_pool_name(name, expected):
    assert gcp_names.node_pool_name_problems(name) == expected


@pytest.mark.parametrize(
    "account_id, expected",
    [
        ("abcdef", []),
        ("maxtext-tpu-nodes", []),
        ("a" * 30, []),
        ("a-nod", ["is 5 characters long (at least 6)"]),
        ("a" * 31, ["is 31 characters long (at most 30)"]),
        ("a" * 29 + "-", ["ends with '-'"]),
        ("Nodes-1", ["has uppercase letters"]),
        ("1nodes", ["does not start with a letter"]),
    ],
)
def test_service_account_id(account_id, expected):
    assert gcp_names.service_account_id_problems(account_id) == expected


@pytest.mark.parametrize(
    "repository_id, expected",
    [
        ("maxtext-tpu-images", []),
        ("r" * 63, []),
        ("r" * 64, ["is 64 characters long (at most 63)"]),
        ("images_1", [f"{NOT_LOWER}: '_'"]),
        ("images-", ["ends with '-'"]),
    ],
)
def test_artifact_repository_id(repository_id, expected):
    assert gcp_names.artifact_repository_id_problems(repository_id) == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        ("", []),
        ("dev", []),
        ("prod_eu-1", []),
        ("größe", []),  # international lowercase letters are allowed
        ("v" * 63, []),
        ("v" * 64, ["is 64 characters long (at most 63)"]),
        ("Prod", ["has uppercase letters"]),
        ("prod.eu", ["has characters other than lowercase letters, digits, '_' and '-': '.'"]),
    ],
)
def test_label_value(value, expected):
    assert gcp_names.label_value_problems(value) == expected


@pytest.mark.parametrize(
    "project, expected",
    [
        ("my-project", []),
        ("abcdef", []),
        ("a" * 30, []),
        ("my-gcp-project-123", []),
        ("example.com:my-project", []),  # legacy domain-scoped ids
        ("abcde", ["is 5 characters long (at least 6)"]),
        ("a" * 31, ["is 31 characters long (at most 30)"]),
        ("my-project-", ["ends with '-'"]),
        ("1-project", ["does not start with a letter"]),
        ("my_project", [f"{NOT_LOWER}: '_'"]),
        ("123456789012", ["is a project number, not a project ID"]),
        ("My Project", ["looks like a project's display name (it has spaces or uppercase letters), not its ID"]),
        ("MyProject", ["looks like a project's display name (it has spaces or uppercase letters), not its ID"]),
        ("example.com:ab", ["is 2 characters long (at least 6)"]),
    ],
)
def test_project_id(project, expected):
    assert gcp_names.project_id_problems(project) == expected


BUCKET_CHARACTERS = "has characters other than lowercase letters, digits, '-', '_' and '.'"
EDGES = "does not start and end with a letter or digit"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("abc", []),
        ("my-checkpoints_2026", []),
        ("b" * 63, []),
        ("ckpt.example.com", []),
        (".".join(["c" * 63] * 3) + "." + "d" * 30, []),  # 222 characters, no part over 63
        ("1bucket9", []),
        ("goggles-checkpoints", []),  # one 'o': not a misspelling of google
        ("gs://my-bucket", ["is a gs:// URL; give the bare bucket name, without gs:// or a path"]),
        ("gs://my-bucket/run", ["is a gs:// URL; give the bare bucket name, without gs:// or a path"]),
        ("my-bucket/checkpoints", ["has a '/'; give the bucket name alone, without a path"]),
        ("", ["is empty"]),
        ("ab", ["is 2 characters long (at least 3)"]),
        ("b" * 64, ["is 64 characters long (at most 63)"]),
        (".".join(["c" * 63] * 3) + "." + "d" * 31, ["is 223 characters long (at most 222 with dots)"]),
        ("c" * 64 + ".example.com", ["has a part between dots longer than 63 characters"]),
        ("My-Bucket", ["has uppercase letters"]),
        ("my bucket", [f"{BUCKET_CHARACTERS}: ' '"]),
        ("-bucket", [EDGES]),
        ("bucket_", [EDGES]),
        ("192.168.5.4", ["is an IP address"]),
        ("goog-checkpoints", ["starts with 'goog', which Cloud Storage reserves"]),
        ("my-google-checkpoints", ["contains 'google' or a close misspelling of it, which Cloud Storage refuses"]),
        ("my-g00gle-ckpt", ["contains 'google' or a close misspelling of it, which Cloud Storage refuses"]),
        ("team-googel-runs", ["contains 'google' or a close misspelling of it, which Cloud Storage refuses"]),
    ],
)
def test_bucket_name(name, expected):
    assert gcp_names.bucket_name_problems(name) == expected


SHAPE = "does not have the shape of a machine type (SERIES-FAMILY-VCPUS, or SERIES-custom-VCPUS-MEMORY_MB)"


@pytest.mark.parametrize(
    "machine_type, expected",
    [
        ("n1-standard-16", []),
        ("e2-standard-8", []),
        ("n2-highmem-32", []),
        ("c3-standard-22", []),
        ("n2d-highcpu-224", []),
        ("c3-standard-88-lssd", []),
        ("x4-megamem-960-metal", []),
        ("a2-highgpu-1g", []),
        ("ct6e-standard-4t", []),
        ("e2-micro", []),
        ("g1-small", []),
        ("n2-custom-8-32768", []),
        ("n2-custom-2-20480-ext", []),
        ("custom-4-5120", []),
        ("e2-custom-medium-4096", []),
        ("N1-STANDARD-16", ["has uppercase letters (machine type names are lowercase)"]),
        ("zones/us-east5-b/machineTypes/n1-standard-16", ["is a path or URL; give the bare machine type name"]),
        ("n1-standard", [SHAPE]),
        ("standard-16", [SHAPE]),
        ("n1 standard 16", [SHAPE]),
        ("large", [SHAPE]),
        ("n2-custom-8", [SHAPE]),
        ("n1-standard-16 ", [SHAPE]),
    ],
)
def test_machine_type(machine_type, expected):
    assert gcp_names.machine_type_problems(machine_type) == expected


MOVING = (
    "has the moving tag {tag!r}: the image under it changes without the stack noticing, and nodes pulling at "
    "different times could run different images"
)
DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "image, expected",
    [
        ("rayproject/ray:2.60.0-py312-tpu", []),
        ("us-docker.pkg.dev/my-project/images/maxtext-ray:3c12d23a0c0c143b", []),
        (f"us-docker.pkg.dev/my-project/images/ray@{DIGEST}", []),
        (f"rayproject/ray:latest@{DIGEST}", []),  # the digest pins it
        ("localhost:5000/ray:2.60.0", []),
        ("ray:2.60.0", []),
        ("rayproject/ray", ["has no tag (pin a version)"]),
        ("localhost:5000/ray", ["has no tag (pin a version)"]),
        ("rayproject/ray:latest", [MOVING.format(tag="latest")]),
        ("rayproject/ray:nightly", [MOVING.format(tag="nightly")]),
        ("us-docker.pkg.dev/p/r/ray:main", [MOVING.format(tag="main")]),
        ("rayproject/ray:master", [MOVING.format(tag="master")]),
        ("rayproject/ray:stable", [MOVING.format(tag="stable")]),
        ("rayproject/ray:edge", [MOVING.format(tag="edge")]),
        ("rayproject/ray:dev", [MOVING.format(tag="dev")]),
        ("rayproject/ray:Latest", [MOVING.format(tag="Latest")]),
        (
            "https://us-docker.pkg.dev/p/r/ray:2.60.0",
            ["starts with a URL scheme ('https://'), which image references do not have"],
        ),
        (
            "docker://rayproject/ray:2.60.0",
            ["starts with a URL scheme ('docker://'), which image references do not have"],
        ),
        (
            "rayproject/ray@sha256:abc",
            ["has digest 'sha256:abc'; a digest is sha256: followed by 64 lowercase hex digits"],
        ),
        ("RayProject/ray:2.60.0", ["has uppercase letters in its repository path, which must be lowercase"]),
        ("rayproject/ray:", ["has tag '', which is not 1-128 letters, digits, '_', '.' or '-'"]),
        ("rayproject/ray:.hidden", ["has tag '.hidden', which is not 1-128 letters, digits, '_', '.' or '-'"]),
        (
            "ray--/ray:1",
            ["has a repository path that is not lowercase letters and digits separated by '/', '.', '_' or '-'"],
        ),
        ("bad_host.io/ray:1", ["has registry 'bad_host.io', which is not a host name (with an optional :PORT)"]),
        ("", ["is empty or has spaces"]),
        ("rayproject/ray :2.60.0", ["is empty or has spaces"]),
    ],
)
def test_image_reference(image, expected):
    assert image_reference_problems(image) == expected


# ------------------------------------------------------------------------------- derived names


@pytest.mark.parametrize(
    "cluster_name, account_id",
    [
        ("maxtext-tpu", "maxtext-tpu-nodes"),
        ("c" * 24, "c" * 24 + "-nodes"),  # the longest that keeps the whole suffix
        ("c" * 25, "c" * 25 + "-node"),
        ("c" * 29, "c" * 29 + "-"),  # IAM refuses it: the settings check says so
        ("c" * 40, "c" * 30),
    ],
)
def test_node_service_account_id_is_cut_to_thirty(cluster_name, account_id):
    assert resource_names.node_service_account_id(cluster_name) == account_id
    assert resource_names.NODE_SERVICE_ACCOUNT_FULL_NAME_MAX == 24


def test_derived_names_follow_the_procedure():
    assert resource_names.dcn_network_name("maxtext-tpu", 0) == "maxtext-tpu-net-1"
    assert resource_names.dcn_firewall_name("maxtext-tpu", 1) == "maxtext-tpu-net-2-allow-internal"
    assert resource_names.artifact_repository_id("maxtext-tpu") == "maxtext-tpu-images"
    assert resource_names.tpu_pool_name("v6e-16", 3) == "v6e-16-3"


def test_the_longest_cluster_name_gives_valid_network_firewall_and_repository_names():
    longest = "c" * gcp_names.GKE_CLUSTER_NAME_MAX
    assert gcp_names.compute_name_problems(resource_names.dcn_firewall_name(longest, 1)) == []
    assert gcp_names.artifact_repository_id_problems(resource_names.artifact_repository_id(longest)) == []


def test_every_pool_name_of_the_catalog_is_a_valid_node_pool_name():
    for acc in ACCELERATORS.values():
        for topology in acc.shapes:
            name = resource_names.tpu_pool_name(acc.slice_type(topology), 63)
            assert gcp_names.node_pool_name_problems(name) == [], name


# ------------------------------------------------------------------------------- TPU zones


def test_every_generation_has_zones_and_every_zone_names_its_region():
    assert set(TPU_ZONES) == set(ACCELERATORS)
    for name in ACCELERATORS:
        assert offered_zones(name), name
        for zone in offered_zones(name):
            assert zone.startswith(zone_region(zone) + "-"), zone


def test_zone_lookups():
    assert zone_region("us-east5-b") == "us-east5"
    assert zone_region("us-south1-ai1b") == "us-south1"
    assert "us-east5-b" in accelerator("v6e").zones  # the procedure's zone
    assert "us-east5" in accelerator("v6e").regions
    assert "us-west4-a" not in accelerator("v6e").zones  # v5e only
    assert offered_regions("v5p")[:2] == ("us-central1", "us-east5")
    assert offered_zones("nope") == ()
