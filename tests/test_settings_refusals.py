"""Stack config the cloud would refuse later is refused by the program first, before a single
resource is registered, with every problem at once, each naming the setting, the value and what
would be valid.

Every row runs the whole infra program under mocks (the engine's view: config as strings, keys
marked secret as `pulumi config set --secret` marks them) and checks that nothing was registered.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

from domain.config.settings import SettingsError
from domain.setting import settings_of
from domain.stack_settings import StackSettings
from domain.tpu.capacity_choices import CAPACITY_CHOICES
from domain.tpu.tpu_catalog import FLEX_START_ZONES, offered_regions, offered_zones, single_tenant_zones, zone_region
from tests.support.infra_program import run_infra
from tests.support.pulumi_harness import INFRA_PROJECT, stack_config
from tests.support.refusals import Bad, assert_distinct_cases, assert_refused, refused_by_infra

PROJECT_SETTINGS = ", ".join(entry.key for entry in settings_of(StackSettings) if entry.namespace is None)
DIGEST = "sha256:" + "0123456789abcdef" * 4


def row(
    id: str, config: dict[str, Any], said: str, valid: str, *, secret: frozenset[str] = frozenset(), stack: str = "dev"
) -> Bad:
    """A bad case: one of the refusal's problems says `said` (the setting and its value) and
    `valid` (what would be valid). `config` holds project keys bare, the Google provider's as
    gcp:KEY; `secret` the keys set with --secret."""
    return Bad(id, config, None, (said, valid), stack=stack, secrets=secret)


BUCKET_RULE = "use 3-63 lowercase letters, digits, '-', '_' and '.'"
PROJECT_RULE = "use the project ID (6-30 lowercase letters, digits and '-'"
COMPUTE_RULE = "1-63 lowercase letters, digits and '-', starting with a letter and not ending with '-'"
MACHINE_RULE = "use a Compute Engine machine type name, for example n1-standard-16"
IMAGE_RULE = "use REGISTRY/PATH/maxtext-ray:VERSION (for example us-docker.pkg.dev/my-project/images/maxtext-ray:"
LABEL_RULE = "use lowercase letters, digits and '-', starting with a letter"
SECRET_FIX = "set it without --secret"
AGE_RULE = "use a whole number of days, 1 or more (at most 2147483647), for example 30"
DISK_RULE = "use global/images/NAME for a disk image of this project, or projects/PROJECT_ID/global/images/NAME"
NAMESPACE_RULE = "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"

# The capacity choices, zones and regions the refusals list, read from domain/tpu/capacity_choices.py
# and domain/tpu/tpu_catalog.py's tables (in their order), as tests/support/presets.py reads the
# presets: a new capacity choice, zone or region changes no row that is not about it.
CAPACITY = ", ".join(CAPACITY_CHOICES)
V6E_ZONES = ", ".join(offered_zones("v6e"))
V6E_REGIONS = ", ".join(offered_regions("v6e"))
FLEX_START_V6E_ZONES = ", ".join(FLEX_START_ZONES["v6e"])
FLEX_START_V6E_REGIONS = " or ".join(sorted({zone_region(zone) for zone in FLEX_START_ZONES["v6e"]}))


def v6e_zones(region: str | None = None, *, shared_only: bool = False) -> str:
    """The zones offering TPU v6e, in the table's order: those of `region`, and only those not
    marked single-tenant if `shared_only`."""
    return ", ".join(
        zone
        for zone in offered_zones("v6e")
        if (region is None or zone_region(zone) == region) and not (shared_only and zone in single_tenant_zones("v6e"))
    )


DATASET_PREFIX_RULE = "use folder names of letters, digits, '-', '_' and '.' separated by single '/'"
DATASET_FIX = "set datasetBucket (`pulumi config set datasetBucket <bucket>`)"

ROWS = [
    # ---------------------------------------------------------------- the dataset bucket (issue 27)
    row(
        "dataset-bucket-url",
        {"datasetBucket": "gs://acme-corpus/web"},
        "datasetBucket = 'gs://acme-corpus/web'",
        "give the bare bucket name",
    ),
    row(
        "dataset-bucket-upper",
        {"datasetBucket": "Acme-Corpus"},
        "datasetBucket = 'Acme-Corpus'",
        "the name of the existing bucket",
    ),
    row(
        "dataset-bucket-is-the-checkpoint-bucket",
        {"datasetBucket": "acme-ckpt", "bucketName": "acme-ckpt"},
        "datasetBucket = 'acme-ckpt' is the checkpoint bucket (bucketName)",
        "keep the training data in a bucket of its own",
    ),
    row(
        "dataset-prefix-without-bucket",
        {"datasetPrefix": "web"},
        "datasetPrefix = 'web' does nothing without datasetBucket",
        DATASET_FIX,
    ),
    row(
        "dataset-cache-without-bucket",
        {"datasetFileCacheMib": "4096"},
        "datasetFileCacheMib = 4096 does nothing without datasetBucket",
        DATASET_FIX,
    ),
    row(
        "dataset-prefix-leading-slash",
        {"datasetBucket": "acme-corpus", "datasetPrefix": "/web"},
        "datasetPrefix = '/web' starts or ends with '/'",
        DATASET_PREFIX_RULE,
    ),
    row(
        "dataset-prefix-trailing-slash",
        {"datasetBucket": "acme-corpus", "datasetPrefix": "web/"},
        "datasetPrefix = 'web/' starts or ends with '/'",
        DATASET_PREFIX_RULE,
    ),
    row(
        "dataset-prefix-empty-folder",
        {"datasetBucket": "acme-corpus", "datasetPrefix": "web//v1"},
        "datasetPrefix = 'web//v1' has an empty folder name",
        DATASET_PREFIX_RULE,
    ),
    row(
        "dataset-prefix-dot-dot",
        {"datasetBucket": "acme-corpus", "datasetPrefix": "web/../v1"},
        "datasetPrefix = 'web/../v1' has a '.' or '..' folder",
        DATASET_PREFIX_RULE,
    ),
    row(
        "dataset-prefix-comma",
        {"datasetBucket": "acme-corpus", "datasetPrefix": "web,v1"},
        "datasetPrefix = 'web,v1' has ','",
        "only-dir option",
    ),
    row(
        "dataset-prefix-too-long",
        {"datasetBucket": "acme-corpus", "datasetPrefix": "w" * 1025},
        "is longer than Cloud Storage's 1024 bytes",
        "use a shorter folder",
    ),
    row(
        "dataset-cache-zero",
        {"datasetBucket": "acme-corpus", "datasetFileCacheMib": "0"},
        "datasetFileCacheMib = 0 is out of range",
        "use 1 to 262144",
    ),
    row(
        "dataset-cache-too-large",
        {"datasetBucket": "acme-corpus", "datasetFileCacheMib": "300000"},
        "datasetFileCacheMib = 300000 is out of range",
        "use 1 to 262144",
    ),
    row(
        "dataset-cache-not-a-number",
        {"datasetBucket": "acme-corpus", "datasetFileCacheMib": "8GiB"},
        "datasetFileCacheMib = '8GiB' is not a whole number",
        "use 1 to 262144",
    ),
    # ---------------------------------------------------------------- bucketName (Cloud Storage)
    row("bucket-url", {"bucketName": "gs://my-ckpt"}, "bucketName = 'gs://my-ckpt'", "give the bare bucket name"),
    row("bucket-path", {"bucketName": "my-ckpt/runs"}, "bucketName = 'my-ckpt/runs'", "give the bucket name alone"),
    row("bucket-upper", {"bucketName": "My-Checkpoints"}, "bucketName = 'My-Checkpoints'", BUCKET_RULE),
    row("bucket-short", {"bucketName": "ck"}, "bucketName = 'ck'", BUCKET_RULE),
    row("bucket-long", {"bucketName": "c" * 64}, f"bucketName = '{'c' * 64}'", BUCKET_RULE),
    row("bucket-edge", {"bucketName": "ckpt-"}, "bucketName = 'ckpt-'", "starting and ending with a letter or digit"),
    row("bucket-space", {"bucketName": "my ckpt"}, "bucketName = 'my ckpt'", BUCKET_RULE),
    row("bucket-ip", {"bucketName": "192.168.5.4"}, "bucketName = '192.168.5.4'", "not an IP address"),
    row("bucket-goog", {"bucketName": "goog-ckpt"}, "bucketName = 'goog-ckpt'", "not starting with 'goog'"),
    row("bucket-google", {"bucketName": "my-google-ckpt"}, "bucketName = 'my-google-ckpt'", "not containing 'google'"),
    row("bucket-g00gle", {"bucketName": "g00gle-ckpt"}, "bucketName = 'g00gle-ckpt'", "not containing 'google'"),
    row(
        "bucket-dotted-part",
        {"bucketName": "c" * 64 + ".example.com"},
        "has a part between dots longer than 63 characters",
        "1 to 63 between dots",
    ),
    row(
        "bucket-empty-label",
        {"bucketName": "my..ckpt"},
        "bucketName = 'my..ckpt' is not a Cloud Storage bucket name: it has an empty part between dots",
        "1 to 63 between dots",
    ),
    row(
        "bucket-dash-label",
        {"bucketName": "my-.ckpt"},
        "bucketName = 'my-.ckpt' is not a Cloud Storage bucket name: it has a part between dots that starts or ends",
        "none of them starting or ending with '-'",
    ),
    # ---------------------------------------------------------------- gcp:defaultLabels
    row(
        "default-labels-upper-and-space",
        {"gcp:defaultLabels": {"team": "ML Research"}},
        "gcp:defaultLabels = {'team': 'ML Research'} is refused by GCP on every labelled resource: it has 'team' = "
        "'ML Research', whose value has uppercase letters",
        "each value at most 63 lowercase letters, digits, '_' and '-'",
    ),
    row(
        "default-labels-key",
        {"gcp:defaultLabels": '{"Cost Center": "ml"}'},
        "it has the key 'Cost Center', which does not start with a lowercase letter",
        "each key 1-63 lowercase letters, digits, '_' and '-' starting with a letter",
    ),
    # ---------------------------------------------------------------- gcp:project
    row("project-display-name", {"gcp:project": "My Project"}, "gcp:project = 'My Project'", PROJECT_RULE),
    row(
        "project-number",
        {"gcp:project": "123456789012"},
        "gcp:project = '123456789012'",
        "not its display name or number",
    ),
    row("project-short", {"gcp:project": "abc"}, "gcp:project = 'abc'", PROJECT_RULE),
    row("project-long", {"gcp:project": "p" * 31}, f"gcp:project = '{'p' * 31}'", PROJECT_RULE),
    row("project-hyphen", {"gcp:project": "my-project-"}, "gcp:project = 'my-project-'", "not ending with '-'"),
    row("project-digit", {"gcp:project": "1-project"}, "gcp:project = '1-project'", "starting with a letter"),
    row("project-underscore", {"gcp:project": "my_project"}, "gcp:project = 'my_project'", PROJECT_RULE),
    # ---------------------------------------------------------------- reservation (Compute Engine)
    row("reservation-upper", {"reservation": "My_Reservation"}, "reservation = 'My_Reservation'", COMPUTE_RULE),
    row("reservation-hyphen", {"reservation": "v6e-res-"}, "reservation = 'v6e-res-'", COMPUTE_RULE),
    row("reservation-digit", {"reservation": "1-res"}, "reservation = '1-res'", COMPUTE_RULE),
    row("reservation-long", {"reservation": "r" * 64}, f"reservation = '{'r' * 64}'", COMPUTE_RULE),
    row(
        "reservation-zonal-path",
        {"reservation": "zones/us-east5-b/reservations/res"},
        "reservation = 'zones/us-east5-b/reservations/res'",
        "projects/PROJECT_ID/reservations/NAME",
    ),
    row(
        "reservation-shared-bad-project",
        {"reservation": "projects/Owner/reservations/res"},
        "reservation = 'projects/Owner/reservations/res'",
        "projects/PROJECT_ID/reservations/NAME",
    ),
    row(
        "reservation-shared-on-autopilot",
        {"mode": "autopilot", "capacity": ["reservation"], "reservation": "projects/owner-project/reservations/res"},
        "reservation = 'projects/owner-project/reservations/res' is a shared reservation's path",
        "use a reservation of this project, or mode = standard",
    ),
    # ---------------------------------------------------------------- network (VPC)
    row(
        "network-path",
        {"network": "projects/p/global/networks/vpc"},
        "network = 'projects/p/global/networks/vpc'",
        "the bare name of a VPC network",
    ),
    row("network-upper", {"network": "Default"}, "network = 'Default'", COMPUTE_RULE),
    row("network-underscore", {"network": "vpc_1"}, "network = 'vpc_1'", COMPUTE_RULE),
    row("network-long", {"network": "n" * 64}, f"network = '{'n' * 64}'", COMPUTE_RULE),
    row(
        "network-is-a-dcn-network",
        {"network": "maxtext-tpu-net-1"},
        "network = 'maxtext-tpu-net-1' is one of the DCN networks",
        "must be another one (for example default)",
    ),
    # ---------------------------------------------------------------- headMachineType
    row("machine-upper", {"headMachineType": "N1-STANDARD-16"}, "headMachineType = 'N1-STANDARD-16'", MACHINE_RULE),
    row("machine-no-vcpus", {"headMachineType": "n1-standard"}, "headMachineType = 'n1-standard'", MACHINE_RULE),
    row(
        "machine-url",
        {"headMachineType": "zones/us-east5-b/machineTypes/n1-standard-16"},
        "headMachineType = 'zones/us-east5-b/machineTypes/n1-standard-16'",
        MACHINE_RULE,
    ),
    row("machine-no-series", {"headMachineType": "standard-16"}, "headMachineType = 'standard-16'", MACHINE_RULE),
    row("machine-spaces", {"headMachineType": "n1 standard 16"}, "headMachineType = 'n1 standard 16'", MACHINE_RULE),
    row("machine-size-word", {"headMachineType": "large"}, "headMachineType = 'large'", MACHINE_RULE),
    row(
        "machine-custom-no-memory", {"headMachineType": "n2-custom-8"}, "headMachineType = 'n2-custom-8'", MACHINE_RULE
    ),
    # ---------------------------------------------------------------- names the program derives
    row(
        "cluster-name-29-chars",
        {"clusterName": "c" * 29},
        f"clusterName = '{'c' * 29}' makes the node service account id '{'c' * 29}-', which IAM refuses",
        "use at most 24 characters",
    ),
    row(
        "cluster-name-cut-at-hyphen",
        {"clusterName": "c" * 29 + "-x"},
        f"node service account id '{'c' * 29}-', which IAM refuses: it ends with '-'",
        "use at most 24 characters",
    ),
    row(
        "stack-name-upper",
        {},
        "the stack name 'Prod' becomes the cluster's label maxtext-tpu-stack=Prod",
        "use a stack named with at most 63 lowercase letters, digits, '_' and '-'",
        stack="Prod",
    ),
    row(
        "stack-name-dot",
        {},
        "the stack name 'prod.eu' becomes the cluster's label",
        "use a stack named with at most 63 lowercase letters",
        stack="prod.eu",
    ),
    row("cluster-name-long", {"clusterName": "c" * 41}, f"clusterName = '{'c' * 41}'", "at most 40 characters"),
    row("cluster-name-digit", {"clusterName": "1-cluster"}, "clusterName = '1-cluster'", LABEL_RULE),
    row("namespace-upper", {"namespace": "Training"}, "namespace = 'Training'", NAMESPACE_RULE),
    row(
        "namespace-system",
        {"namespace": "kube-system"},
        "namespace = 'kube-system' is a namespace every cluster already has",
        "use a namespace of its own",
    ),
    row(
        "service-account-default",
        {"serviceAccount": "default"},
        "serviceAccount = 'default' is the account Kubernetes creates",
        "use another name (for example maxtext-ray)",
    ),
    # ---------------------------------------------------------------- rayImage
    row(
        "image-scheme",
        {"rayImage": "https://us-docker.pkg.dev/p/r/ray:2.60.0"},
        "rayImage = 'https://us-docker.pkg.dev/p/r/ray:2.60.0'",
        IMAGE_RULE,
    ),
    row("image-latest", {"rayImage": "rayproject/ray:latest"}, "rayImage = 'rayproject/ray:latest'", IMAGE_RULE),
    row("image-nightly", {"rayImage": "rayproject/ray:nightly"}, "rayImage = 'rayproject/ray:nightly'", IMAGE_RULE),
    row(
        "image-main",
        {"rayImage": "us-docker.pkg.dev/p/r/ray:main"},
        "rayImage = 'us-docker.pkg.dev/p/r/ray:main'",
        IMAGE_RULE,
    ),
    row("image-stable", {"rayImage": "rayproject/ray:stable"}, "rayImage = 'rayproject/ray:stable'", IMAGE_RULE),
    row(
        "image-no-tag",
        {"rayImage": "rayproject/ray"},
        "rayImage = 'rayproject/ray'",
        "or unset it to build the worker image",
    ),
    row(
        "image-short-digest",
        {"rayImage": "rayproject/ray@sha256:abc"},
        "rayImage = 'rayproject/ray@sha256:abc'",
        IMAGE_RULE,
    ),
    row("image-upper", {"rayImage": "RayProject/Ray:2.60.0"}, "rayImage = 'RayProject/Ray:2.60.0'", IMAGE_RULE),
    row("image-empty-tag", {"rayImage": "rayproject/ray:"}, "rayImage = 'rayproject/ray:'", IMAGE_RULE),
    # ---------------------------------------------------------------- combinations
    row(
        "spot-the-setting-of-earlier-releases",
        {"spot": True},
        "spot is no longer a setting",
        "`pulumi config set capacity spot`",
    ),
    row(
        "capacity-unknown",
        {"capacity": ["preemptible"]},
        "capacity = ['preemptible'] has 'preemptible'",
        f"choose from: {CAPACITY}",
    ),
    row("capacity-empty", {"capacity": []}, "capacity = [] is empty", "choose at least one of"),
    row(
        "capacity-repeated",
        {"mode": "autopilot", "capacity": ["spot", "spot"]},
        "capacity = ['spot', 'spot'] names 'spot' more than once",
        "list each choice once",
    ),
    row(
        "capacity-fallback-order-on-standard",
        {"capacity": ["on-demand", "spot"]},
        "capacity = ['on-demand', 'spot'] is a fallback order, which a Standard cluster cannot follow",
        "or use mode = autopilot",
    ),
    row(
        "capacity-reservation-unnamed",
        {"capacity": ["reservation"]},
        "capacity = ['reservation'] includes reservation, but no reservation is named",
        "`pulumi config set reservation <name>`",
    ),
    row(
        "reservation-not-in-capacity",
        {"reservation": "v6e-res"},
        "reservation = 'v6e-res' does nothing while capacity = ['on-demand']",
        "`pulumi config rm reservation`",
    ),
    row(
        "reservation-not-in-capacity-autopilot",
        {"mode": "autopilot", "capacity": ["spot", "flex-start"], "reservation": "v6e-res"},
        "reservation = 'v6e-res' does nothing while capacity = ['spot', 'flex-start']",
        "add it",
    ),
    row("min-slices-above-slices", {"minSlices": 3}, "minSlices = 3 is more than the stack's 2 slice(s)", "use 0 to 2"),
    row("min-slices-negative", {"minSlices": -1}, "minSlices = -1 is out of range", "use 0 to 64"),
    row(
        "flex-start-kept-up",
        {"capacity": ["flex-start"], "minSlices": 1},
        "minSlices = 1 with capacity = flex-start",
        "set minSlices to 0",
    ),
    row(
        "flex-start-in-a-zone-without-it",
        {"gcp:zone": "us-east5-c", "capacity": ["flex-start"]},
        f"gcp:zone = 'us-east5-c' with capacity = flex-start: GKE offers flex-start TPU v6e only in {FLEX_START_V6E_ZONES}",
        "use one of those zones, or another capacity choice",
    ),
    row(
        "flex-start-in-a-region-without-it-autopilot",
        {
            "mode": "autopilot",
            "gcp:region": "us-central1",
            "gcp:zone": "us-central1-b",
            "capacity": ["on-demand", "flex-start"],
        },
        "gcp:region = 'us-central1' with capacity including flex-start",
        f"use {FLEX_START_V6E_REGIONS}, or drop flex-start from capacity",
    ),
    row(
        "idle-timeout-without-autoscaling",
        {"minSlices": 2, "idleTimeoutSeconds": 600},
        "idleTimeoutSeconds = 600 does nothing while minSlices = slices (2)",
        "`pulumi config rm idleTimeoutSeconds`",
    ),
    row(
        "idle-timeout-too-short", {"idleTimeoutSeconds": 5}, "idleTimeoutSeconds = 5 is out of range", "use 30 to 86400"
    ),
    row(
        "spot-below-the-shutdown-grace-version",
        {"capacity": ["spot"], "gkeVersion": "1.34.1-gke.1829001"},
        "gkeVersion = '1.34.1-gke.1829001' with capacity = spot",
        "use 1.35.0-gke.1171000 or later, or another capacity choice",
    ),
    row(
        "mesh-16-way-fsdp-on-4-chips",
        {"topology": "2x2"},
        "topology = '2x2' (4 chips per slice, 2 slice(s)) cannot run preset 'llama3-8b'",
        "use topology 4x4",
    ),
    row(
        "mesh-16-way-fsdp-on-32-chips",
        {"topology": "4x8"},
        "topology = '4x8' (32 chips per slice, 2 slice(s)) cannot run preset 'llama3-8b'",
        "use topology 4x4",
    ),
    row(
        "mesh-70b-on-8-chips",
        {"preset": "llama3-70b", "topology": "2x4", "slices": 4},
        "topology = '2x4' (8 chips per slice, 4 slice(s)) cannot run preset 'llama3-70b'",
        "use topology 4x4",
    ),
    row(
        "mesh-on-a-single-chip",
        {"topology": "1x1", "slices": 1},
        "topology = '1x1' (1 chip per slice, 1 slice(s)) cannot run preset 'llama3-8b'",
        "use topology 4x4",
    ),
    row(
        "production-without-protection",
        {"production": True},
        "production = true but deletionProtection is false",
        "run `pulumi config set deletionProtection true`",
    ),
    row(
        "production-with-protection-off",
        {"production": True, "deletionProtection": False},
        "production = true but deletionProtection is false",
        "run `pulumi config set deletionProtection true`",
    ),
    row(
        "production-force-destroys-its-checkpoints",
        {"production": True, "deletionProtection": True},
        "production = true but bucketForceDestroy is true, so it would delete the bucket with every checkpoint",
        "run `pulumi config set bucketForceDestroy false`",
    ),
    row(
        "zone-single-tenant-on-demand",
        {"gcp:zone": "us-east5-c"},
        "gcp:zone = 'us-east5-c' is marked single-tenant for TPU v6e",
        "use a reservation (`pulumi config set capacity reservation` and `pulumi config set reservation <name>`), "
        f"or a zone not marked so in us-east5: {v6e_zones('us-east5', shared_only=True)}",
    ),
    row(
        "region-single-tenant-spot-autopilot",
        {"mode": "autopilot", "gcp:region": "us-east4", "gcp:zone": "us-east4-a", "capacity": ["spot", "on-demand"]},
        "gcp:region = 'us-east4' has only zones (us-east4-a, us-east4-b) that are marked single-tenant",
        f"or a zone not marked so: {v6e_zones(shared_only=True)}",
    ),
    row(
        "zone-without-v6e",
        {"gcp:region": "us-central1", "gcp:zone": "us-central1-a"},
        "gcp:zone = 'us-central1-a' does not offer TPU v6e",
        f"use a zone that does in us-central1: {v6e_zones('us-central1')}",
    ),
    row(
        "zone-v5e-only",
        {"gcp:region": "us-west4", "gcp:zone": "us-west4-a"},
        "gcp:zone = 'us-west4-a' does not offer TPU v6e",
        f"use a zone that does (set gcp:region to match): {V6E_ZONES}",
    ),
    row(
        "region-without-v6e",
        {"gcp:region": "europe-west1", "gcp:zone": "europe-west1-b"},
        "gcp:zone = 'europe-west1-b' does not offer TPU v6e",
        f"use a zone that does (set gcp:region to match): {V6E_ZONES}",
    ),
    row(
        "autopilot-region-without-v6e",
        {"mode": "autopilot", "gcp:region": "europe-west1", "gcp:zone": "europe-west1-b"},
        "gcp:region = 'europe-west1' has no zone offering TPU v6e",
        f"use one of: {V6E_REGIONS}",
    ),
    # ---------------------------------------------------------------- arithmetic the program has the numbers for
    row(
        "head-machine-8-vcpus",
        {"headMachineType": "n1-standard-8", "minSlices": 2},
        "headMachineType = 'n1-standard-8' is too small for the Ray head: a GKE node of it offers 7.91 allocatable "
        "CPUs of its 8 vCPUs for the head's request of 8",
        "use a machine type with more, for example n1-standard-16",
    ),
    row(
        "head-machine-memory",
        {"headMachineType": "n2-highcpu-16"},
        "offers 13.30 GiB of allocatable memory of its 16 GiB for the head's and its autoscaler's requests of 16.5 GiB",
        "use a machine type with more",
    ),
    row(
        # Room for the head (16 GiB) but not for the autoscaler's sidecar beside it (0.5 GiB more).
        "head-machine-without-room-for-the-autoscaler",
        {"headMachineType": "n2-custom-16-19456"},
        "offers 16.12 GiB of allocatable memory of its 19 GiB for the head's and its autoscaler's requests of 16.5 GiB",
        "use a machine type with more",
    ),
    row(
        "head-machine-custom",
        {"headMachineType": "n2-custom-4-65536"},
        "headMachineType = 'n2-custom-4-65536' is too small for the Ray head",
        "use a machine type with more",
    ),
    row(
        "head-machine-shared-core",
        {"headMachineType": "e2-medium"},
        "headMachineType = 'e2-medium' is too small for the Ray head",
        "use a machine type with more",
    ),
    row(
        "dcn-smaller-than-29",
        {"dcnSubnets": ["10.50.0.0/30", "10.60.0.0/16"]},
        "dcnSubnets: 10.50.0.0/30 is smaller than /29, Google Cloud's smallest subnet",
        "use non-overlapping ranges of /29 or larger",
    ),
    row(
        "dcn-too-small-for-the-vms",
        {"slices": 64, "dcnSubnets": ["10.50.0.0/24", "10.60.0.0/16"]},
        "dcnSubnets: 10.50.0.0/24 has 252 usable addresses (256 less the 4 Google Cloud reserves), but the "
        "slices' 256 TPU VMs take one each",
        "use a /23 or larger",
    ),
    row(
        "dcn-29-too-small-for-8-vms",
        {"dcnSubnets": ["10.50.0.0/29", "10.60.0.0/16"]},
        "dcnSubnets: 10.50.0.0/29 has 4 usable addresses",
        "use a /28 or larger",
    ),
    row(
        "dcn-overlaps-default-network-subnet",
        {"dcnSubnets": ["10.202.0.0/16", "10.60.0.0/16"]},
        "dcnSubnets: 10.202.0.0/16 overlaps 10.202.0.0/20, the us-east5 subnet of the auto mode network 'default'",
        "a TPU VM cannot have interfaces in overlapping subnets",
    ),
    row(
        "dcn-in-auto-block-on-another-network",
        {"network": "research-vpc", "dcnSubnets": ["10.130.0.0/16", "10.60.0.0/16"]},
        "dcnSubnets: 10.130.0.0/16 is in 10.128.0.0/9, the auto mode subnets' block, and the ranges of network "
        "'research-vpc' are not known here",
        "use a range outside it",
    ),
    row(
        "dcn-loopback",
        {"dcnSubnets": ["127.0.0.0/16", "10.60.0.0/16"]},
        "dcnSubnets: 127.0.0.0/16 meets 127.0.0.0/8 (loopback (RFC 1122)), which no subnet may use",
        "100.64.0.0/10",
    ),
    row(
        "image-other-ray-version",
        {"rayImage": "rayproject/ray:2.40.0-py312-tpu"},
        "rayImage = 'rayproject/ray:2.40.0-py312-tpu' is Ray's own image",
        "it holds Ray 2.40.0, but the cluster runs Ray 2.60.0 (the head, every worker and the job client need the "
        "same Ray; 2.40.0 also predates token authentication",
    ),
    row(
        "image-newer-ray-version",
        {"rayImage": "docker.io/rayproject/ray:2.61.0"},
        "rayImage = 'docker.io/rayproject/ray:2.61.0' is Ray's own image",
        "it holds Ray 2.61.0, but the cluster runs Ray 2.60.0",
    ),
    row(
        "image-stock-ray-without-maxtext",
        {"rayImage": "rayproject/ray:2.60.0-py312-tpu"},
        "rayImage = 'rayproject/ray:2.60.0-py312-tpu' is Ray's own image: only a build of trainer/Dockerfile has "
        "MaxText and this product's trainer package, so every job would fail with `No module named ...`",
        IMAGE_RULE,
    ),
    row(
        "image-not-named-as-the-worker-image",
        {"rayImage": f"us-docker.pkg.dev/p/r/ray@{DIGEST}"},
        f"rayImage = 'us-docker.pkg.dev/p/r/ray@{DIGEST}' is not named as a build of trainer/Dockerfile (its image "
        "name is not 'maxtext-ray')",
        IMAGE_RULE,
    ),
    row(
        "price-overflows-the-cost-outputs",
        {"pricePerChipHour": "1e308"},
        "pricePerChipHour = 1e308 is out of range: times the stack's 32 chips",
        "use a price in US dollars, for example 2.70",
    ),
    row(
        # 32 chips' hour holds a number; their day does not.
        "price-overflows-the-cost-of-a-day",
        {"pricePerChipHour": "5e306"},
        "pricePerChipHour = 5e306 is out of range: times the stack's 32 chips and 24 hours",
        "use a price in US dollars, for example 2.70",
    ),
    row("price-ten-thousand-digits", {"pricePerChipHour": "1" * 10_000}, "pricePerChipHour = '111", "is out of range"),
    row("slices-ten-thousand-digits", {"slices": "1" * 10_000}, "slices = '111", "is out of range; use 1 to 64"),
    row(
        "gke-version-ten-thousand-digits",
        {"gkeVersion": "1.35.2-gke." + "1" * 10_000},
        "gkeVersion: GKE version '1.35.2-gke.111",
        "is not of the form MAJOR.MINOR.PATCH-gke.BUILD",
    ),
    # ---------------------------------------------------------------- settings that do nothing on Autopilot
    row(
        "autopilot-head-machine-type",
        {"mode": "autopilot", "headMachineType": "n2-standard-32"},
        "headMachineType = 'n2-standard-32' does nothing on an Autopilot stack",
        "unset it (`pulumi config rm headMachineType`), or use mode = standard",
    ),
    row(
        "autopilot-dcn-subnets",
        {"mode": "autopilot", "dcnSubnets": ["10.70.0.0/16", "10.80.0.0/16"]},
        "dcnSubnets = ['10.70.0.0/16', '10.80.0.0/16'] does nothing on an Autopilot stack",
        "unset it (`pulumi config rm dcnSubnets`), or use mode = standard",
    ),
    row(
        "autopilot-image-streaming-off",
        {"mode": "autopilot", "imageStreaming": "false"},
        "imageStreaming = 'false' does nothing on an Autopilot stack (Autopilot streams eligible images itself",
        "unset it (`pulumi config rm imageStreaming`), or use mode = standard",
    ),
    row(
        "autopilot-image-cache-disk",
        {"mode": "autopilot", "imageCacheDisk": "global/images/maxtext-ray-disk"},
        "imageCacheDisk = 'global/images/maxtext-ray-disk' does nothing on an Autopilot stack",
        "unset it (`pulumi config rm imageCacheDisk`), or use mode = standard",
    ),
    # ---------------------------------------------------------------- cold start (issue 33)
    *[
        row(
            f"compile-cache-age-{case}",
            {"compileCacheMaxAgeDays": value},
            f"compileCacheMaxAgeDays = {shown} {what}",
            AGE_RULE,
        )
        for case, value, shown, what in [
            ("zero", "0", "0", "is out of range"),
            ("negative", "-7", "-7", "is out of range"),
            ("fraction", "1.5", "1.5", "is not a whole number"),
            ("with-unit", "30d", "'30d'", "is not a whole number"),
            ("boolean", "true", "'true'", "is not a whole number"),
            ("past-int32", "2147483648", "2147483648", "is out of range"),
        ]
    ],
    *[
        row(f"image-cache-disk-{case}", {"imageCacheDisk": value}, f"imageCacheDisk = {value!r} {what}", DISK_RULE)
        for case, value, what in [
            ("bare-name", "maxtext-ray-disk", "is not a disk image path: it is neither of the two forms GKE takes"),
            (
                "url",
                "https://www.googleapis.com/compute/v1/projects/acme-ml/global/images/d",
                "is not a disk image path: it is neither",
            ),
            ("family", "global/images/family/maxtext-ray", "is not a disk image path: it is neither of the two forms"),
            (
                "upper",
                "global/images/MaxText_Disk",
                "is not a disk image path: it names image 'MaxText_Disk', which has uppercase letters",
            ),
            (
                "project-number",
                "projects/123456789012/global/images/d",
                "is not a disk image path: it names project '123456789012', which is a project number",
            ),
        ]
    ],
    row(
        "image-cache-disk-without-streaming",
        {"imageCacheDisk": "global/images/maxtext-ray-disk", "imageStreaming": "false"},
        "imageCacheDisk = 'global/images/maxtext-ray-disk' needs imageStreaming = true",
        "run `pulumi config set imageStreaming true`, or `pulumi config rm imageCacheDisk`",
    ),
    row(
        "image-cache-disk-image-outside-artifact-registry",
        {"imageCacheDisk": "global/images/maxtext-ray-disk", "rayImage": "ghcr.io/acme/maxtext-ray:2.60.0-1"},
        "rayImage = 'ghcr.io/acme/maxtext-ray:2.60.0-1' is in ghcr.io",
        "push it to an Artifact Registry repository (LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/maxtext-ray)",
    ),
    row(
        "image-cache-disk-gke-too-old",
        {"imageCacheDisk": "global/images/maxtext-ray-disk", "gkeVersion": "1.28.2-gke.1000"},
        "gkeVersion = '1.28.2-gke.1000' with imageCacheDisk: GKE attaches secondary boot disks to a node pool "
        "from 1.28.3-gke.1067000",
        "use 1.34.1-gke.1829001 or later (the managed DRANET minimum for standard clusters included)",
    ),
    # ---------------------------------------------------------------- values set with --secret
    *[
        row(
            f"secret-{key}",
            {key: value},
            f"{key} is set as a secret, but it",
            SECRET_FIX,
            secret=frozenset({key}),
        )
        for key, value in [
            ("clusterName", "research-tpu"),
            ("namespace", "training"),
            ("serviceAccount", "trainer"),
            ("network", "research-vpc"),
            ("bucketName", "research-ckpt"),
            ("reservation", "v6e-res"),
            ("preset", "llama3-70b"),
            ("mode", "standard"),
            ("topology", "4x4"),
            ("rayImage", "rayproject/ray:2.60.0-py312-tpu"),
            ("pricePerChipHour", "1.89"),
        ]
    ],
    row(
        "secret-gcp-project",
        {"gcp:project": "my-gcp-project"},
        "gcp:project is set as a secret, but it is part of the clusterId",
        "`pulumi config set gcp:project VALUE`",
        secret=frozenset({"gcp:project"}),
    ),
]


def refused(settings: dict[str, Any], *, secret: frozenset[str] = frozenset()):
    """The SettingsError for dev's config plus `settings`, and the monitor that recorded (or did
    not) each registration."""
    return refused_by_infra(Bad("refused", settings, None, (), secrets=secret))


def test_there_are_enough_rows():
    assert_distinct_cases(ROWS, at_least=60)


@pytest.mark.parametrize("case", ROWS, ids=[r.id for r in ROWS])
def test_bad_setting_is_refused_before_any_resource(case: Bad):
    error, monitor = refused_by_infra(case)
    # One message says both which setting (with its value) is wrong and what would be valid.
    assert_refused(case, error, monitor, SettingsError)


def test_every_problem_is_reported_at_once():
    error, monitor = refused(
        {
            "bucketName": "gs://my-ckpt",
            "gcp:project": "My Project",
            "headMachineType": "n1-standard",
            "rayImage": "rayproject/ray:latest",
            "capacity": ["on-demand", "spot"],
            "reservation": "v6e-res",
            "production": True,
            "topology": "2x2",
        }
    )
    assert monitor.registrations == []
    starts = [
        "gcp:project = 'My Project'",
        "topology = '2x2'",
        "capacity = ['on-demand', 'spot'] is a fallback order",
        "reservation = 'v6e-res' does nothing",
        "bucketName = 'gs://my-ckpt'",
        "production = true",
        "headMachineType = 'n1-standard'",
        "rayImage = 'rayproject/ray:latest'",
    ]
    for start in starts:
        assert sum(problem.startswith(start) for problem in error.problems) == 1, (start, error.problems)
    assert len(error.problems) == len(starts)


def test_a_secret_value_is_never_repeated_in_a_message():
    error, monitor = refused({"clusterName": "Secret_Cluster"}, secret=frozenset({"clusterName"}))
    assert monitor.registrations == []
    assert "Secret_Cluster" not in str(error)
    assert any(problem.startswith("clusterName = [secret] is not valid") for problem in error.problems)


def test_every_setting_says_where_a_secret_value_would_appear():
    assert all(entry.in_clear for entry in settings_of(StackSettings))


def test_a_secret_that_stays_out_of_outputs_and_names_is_not_this_checks_business():
    """Keys are refused by what they are, not by being secret: an unknown secret key is reported
    as unknown (once), not as leaking."""
    error, _ = refused({"apiToken": "x"}, secret=frozenset({"apiToken"}))
    assert [p for p in error.problems if "apiToken" in p] == [
        f"{INFRA_PROJECT}:apiToken is not a setting of this project; valid settings: {PROJECT_SETTINGS}"
    ]


# ---------------------------------------------------------------- what still deploys, unchanged

# Recorded from the program before these checks existed: the shipped stacks must register
# exactly these resources (type, name), no more and no fewer.
DEV_STANDARD = [
    ("command:local:Command", "worker-image-build"),
    ("gcp:artifactregistry/repository:Repository", "worker-image-repository"),
    ("gcp:compute/firewall:Firewall", "dcn-net-1-allow-internal"),
    ("gcp:compute/firewall:Firewall", "dcn-net-2-allow-internal"),
    ("gcp:compute/network:Network", "dcn-net-1"),
    ("gcp:compute/network:Network", "dcn-net-2"),
    ("gcp:compute/subnetwork:Subnetwork", "dcn-subnet-1"),
    ("gcp:compute/subnetwork:Subnetwork", "dcn-subnet-2"),
    ("gcp:container/cluster:Cluster", "maxtext-tpu"),
    ("gcp:container/nodePool:NodePool", "maxtext-tpu-ray-head-pool"),
    ("gcp:container/nodePool:NodePool", "tpu-0"),
    ("gcp:container/nodePool:NodePool", "tpu-1"),
    ("gcp:projects/iAMMember:IAMMember", "maxtext-tpu-nodes-artifactregistry.reader"),
    ("gcp:projects/iAMMember:IAMMember", "maxtext-tpu-nodes-logging.logWriter"),
    ("gcp:projects/iAMMember:IAMMember", "maxtext-tpu-nodes-monitoring.metricWriter"),
    ("gcp:projects/iAMMember:IAMMember", "maxtext-tpu-nodes-monitoring.viewer"),
    ("gcp:projects/iAMMember:IAMMember", "maxtext-tpu-nodes-serviceusage.serviceUsageConsumer"),
    ("gcp:projects/iAMMember:IAMMember", "maxtext-tpu-nodes-stackdriver.resourceMetadata.writer"),
    ("gcp:projects/service:Service", "apis-artifactregistry"),
    ("gcp:projects/service:Service", "apis-cloudbuild"),
    ("gcp:projects/service:Service", "apis-cloudresourcemanager"),
    ("gcp:projects/service:Service", "apis-compute"),
    ("gcp:projects/service:Service", "apis-container"),
    ("gcp:projects/service:Service", "apis-containerfilesystem"),
    ("gcp:projects/service:Service", "apis-iam"),
    ("gcp:projects/service:Service", "apis-storage"),
    ("gcp:serviceaccount/account:Account", "maxtext-tpu-nodes"),
    ("gcp:storage/bucket:Bucket", "checkpoints-bucket"),
    ("gcp:storage/bucketIAMMember:BucketIAMMember", "checkpoints-checkpoint-access"),
    ("kubernetes:core/v1:ServiceAccount", "checkpoints-ksa"),
    ("kubernetes:ray.io/v1:RayCluster", "ray-cluster"),
    ("kubernetes:resource.k8s.io/v1:ResourceClaimTemplate", "ray-netdev-claim"),
    ("maxtext-tpu:cluster:GkeCluster", "maxtext-tpu"),
    ("maxtext-tpu:image:WorkerImage", "worker-image"),
    ("maxtext-tpu:network:DcnNetworks", "dcn"),
    ("maxtext-tpu:project:ProjectApis", "apis"),
    ("maxtext-tpu:ray:KubeRay", "ray"),
    ("maxtext-tpu:storage:CheckpointStorage", "checkpoints"),
    ("maxtext-tpu:tpu:TpuSlices", "tpu"),
    ("pulumi-python:dynamic/kubernetes:CrdEstablished", "ray-crd-ready"),
    ("pulumi:providers:kubernetes", "maxtext-tpu-k8s"),
]
_STANDARD_ONLY = {
    ("gcp:compute/firewall:Firewall", "dcn-net-1-allow-internal"),
    ("gcp:compute/firewall:Firewall", "dcn-net-2-allow-internal"),
    ("gcp:compute/network:Network", "dcn-net-1"),
    ("gcp:compute/network:Network", "dcn-net-2"),
    ("gcp:compute/subnetwork:Subnetwork", "dcn-subnet-1"),
    ("gcp:compute/subnetwork:Subnetwork", "dcn-subnet-2"),
    ("gcp:container/nodePool:NodePool", "maxtext-tpu-ray-head-pool"),
    ("gcp:container/nodePool:NodePool", "tpu-0"),
    ("gcp:container/nodePool:NodePool", "tpu-1"),
    ("maxtext-tpu:network:DcnNetworks", "dcn"),
}
DEV_AUTOPILOT = sorted(
    [entry for entry in DEV_STANDARD if entry not in _STANDARD_ONLY]
    + [("kubernetes:cloud.google.com/v1:ComputeClass", "tpu-compute-class")]
)


@pytest.mark.parametrize(
    "overrides, expected, count",
    [({}, DEV_STANDARD, 41), ({"maxtext-tpu-infra:mode": "autopilot"}, DEV_AUTOPILOT, 32)],
    ids=["dev", "dev-autopilot"],
)
def test_shipped_stacks_register_the_same_resources_as_before(overrides, expected, count):
    config = stack_config("dev")
    config.update(overrides)
    run = run_infra(config)
    assert len(run.registrations) == count == len(expected)
    assert sorted((r.type, r.name) for r in run.registrations) == expected
    assert collections.Counter(r.type for r in run.registrations) == collections.Counter(t for t, _ in expected)
