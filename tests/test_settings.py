"""Stack settings: defaults, and bad input that must stop the program with a useful message."""

import dataclasses

import pytest

from domain.config.raw_config import read
from domain.config.settings import PartialStackSettings, SettingsError, settings_cost
from domain.stack_settings import MAX_SLICES, StackSettings
from domain.tpu.tpu_catalog import accelerator
from tests.support.cli_settings import infra_settings
from tests.support.presets import ALL_PRESETS, TPU_PRESETS
from tests.support.refusals import assert_one_problem

PROJECT = "maxtext-tpu-infra"
VALID = {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"}


def parse(**overrides):
    """`project`, `region` and `zone` are the Google provider's (gcp:KEY)."""
    qualified = {
        f"gcp:{key}" if key in ("project", "region", "zone") else key: value for key, value in overrides.items()
    }
    return infra_settings({**VALID, **qualified})


def problems_of(**overrides) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        parse(**overrides)
    return caught.value.problems


def test_defaults_are_the_procedure():
    settings = parse()
    assert settings.preset.name == "llama3-8b"
    assert (settings.accelerator.name, settings.topology, settings.slices) == ("v6e", "4x4", 2)
    assert settings.mode == "standard"
    assert settings.cluster_location == "us-east5-b"
    assert settings.dcn_subnets == ("10.50.0.0/16", "10.60.0.0/16")
    assert settings.total_chips == 32
    assert settings.deletion_protection is False
    assert settings.bucket_force_destroy is True


def test_autopilot_is_regional():
    settings = parse(mode="autopilot")
    assert settings.cluster_location == "us-east5"
    assert not settings.uses_dcn_networks


def test_engine_strings_are_parsed():
    settings = parse(slices="4", capacity="spot", dcnSubnets='["10.1.0.0/16", "10.2.0.0/16"]')
    assert (settings.slices, settings.spot, settings.dcn_subnets) == (4, True, ("10.1.0.0/16", "10.2.0.0/16"))


V6E_TOPOLOGIES = ", ".join(accelerator("v6e").shapes)
SUBNET_RULE = "use non-overlapping ranges of /29 or larger"


@pytest.mark.parametrize(
    "overrides, setting, shown, phrase, fix",
    [
        ({"preset": "llama3-405b"}, "preset", "'llama3-405b'", "is not valid", f"choose one of: {ALL_PRESETS}"),
        (
            {"preset": "tiny-cpu"}, "preset", "'tiny-cpu'", "runs on CPU through a local Ray cluster, not on GKE",
            f"choose a TPU preset: {TPU_PRESETS}",
        ),
        ({"mode": "serverless"}, "mode", "'serverless'", "is not valid", "choose one of: standard, autopilot"),
        (
            {"topology": "3x3"}, "topology", "'3x3'", "is not a topology of TPU v6e",
            f"valid topologies: {V6E_TOPOLOGIES}",
        ),
        ({"slices": "0"}, "slices", "0", "is out of range", f"use 1 to {MAX_SLICES}"),
        ({"slices": "65"}, "slices", "65", "is out of range", f"use 1 to {MAX_SLICES}"),
        ({"slices": "two"}, "slices", "'two'", "is not a whole number", f"use 1 to {MAX_SLICES}"),
        (
            {"zone": "us-central1-a"}, "gcp:zone", "'us-central1-a'", "is not a zone of region 'us-east5'",
            "use us-east5-a",
        ),
        (
            {"region": "eastus"}, "gcp:region", "'eastus'", "is not a Google Cloud region",
            "run `pulumi config set gcp:region <region>`",
        ),
        ({"project": None}, "gcp:project", None, "is not set", "run `pulumi config set gcp:project <project-id>`"),
        (
            {"dcnSubnets": '["10.50.0.0/16", "10.50.128.0/17"]'}, "dcnSubnets", "10.50.0.0/16",
            "overlaps 10.50.128.0/17", SUBNET_RULE,
        ),
        (
            {"dcnSubnets": '["10.50.0.0/16"]'}, "dcnSubnets", "has 1 ranges", "TPU v6e needs 2 DCN networks",
            "give exactly 2",
        ),
        (
            {"dcnSubnets": '["8.8.0.0/16", "10.60.0.0/16"]'}, "dcnSubnets", "8.8.0.0/16",
            "is a public range: used privately, it would hide the internet hosts", SUBNET_RULE,
        ),
        (
            {"dcnSubnets": '["10.50.0.1/16", "10.60.0.0/16"]'}, "dcnSubnets", "'10.50.0.1/16'",
            "is not an IPv4 network in CIDR form", SUBNET_RULE,
        ),
        (
            {"mode": "autopilot", "gkeVersion": "1.34.1-gke.1829001"}, "gkeVersion", "'1.34.1-gke.1829001'",
            "is below the managed DRANET minimum for autopilot clusters", "use 1.35.2-gke.1842000 or later",
        ),
        (
            {"gkeVersion": "1.33.5-gke.1000"}, "gkeVersion", "'1.33.5-gke.1000'",
            "is below the managed DRANET minimum for standard clusters", "use 1.34.1-gke.1829001 or later",
        ),
        (
            {"gkeVersion": "latest"}, "gkeVersion", "'latest'", "is not of the form MAJOR.MINOR.PATCH-gke.BUILD",
            "for example 1.35.2-gke.1842000",
        ),
        (
            {"releaseChannel": "BETA"}, "releaseChannel", "'BETA'", "is not valid",
            "choose one of: RAPID, REGULAR, STABLE, EXTENDED",
        ),
        ({"deletionProtection": "yes"}, "deletionProtection", "'yes'", "is not a boolean", "use true or false"),
        ({"clusterName": "My_Cluster"}, "clusterName", "'My_Cluster'", "is not valid", "use lowercase letters"),
        (
            {"rayImage": "rayproject/ray"}, "rayImage", "'rayproject/ray'",
            "is not a pinned container image: it has no tag", "use REGISTRY/PATH/maxtext-ray:VERSION",
        ),
        (
            {"pricePerChipHour": "free"}, "pricePerChipHour", "'free'", "is not a number",
            "use a positive number of US dollars",
        ),
        (
            {"slicse": "4"}, "maxtext-tpu-infra:slicse", None, "is not a setting of this project",
            "valid settings: preset, mode",
        ),
    ],
)  # fmt: skip
def test_bad_input_names_setting_value_and_fix(overrides, setting, shown, phrase, fix):
    assert_one_problem(problems_of(**overrides), setting=setting, value=shown, phrase=phrase, fix=fix)


def test_chip_hour_price_defaults_to_the_catalog_and_can_be_overridden():
    assert settings_cost(parse()).price_per_chip_hour == 2.70
    assert settings_cost(parse(capacity="spot")).price_per_chip_hour == 1.08  # us-east5's Spot price
    assert settings_cost(parse(pricePerChipHour="1.89")).price_per_chip_hour == 1.89


def test_standard_minimum_version_is_accepted():
    assert parse(gkeVersion="1.34.1-gke.1829001").gke_version == "1.34.1-gke.1829001"


def test_every_problem_is_reported_at_once():
    problems = problems_of(preset="nope", mode="nope", slices="0")
    assert [problem.split(" = ")[0] for problem in problems] == ["preset", "mode", "slices"]
    message = str(SettingsError(problems))
    assert message.startswith("invalid stack configuration:\n  - preset")


def test_slice_limit_bounds_are_accepted():
    assert parse(slices="1").slices == 1
    assert parse(slices=str(MAX_SLICES)).slices == MAX_SLICES


def test_other_accelerator_topologies_are_checked_against_their_catalog():
    # A v6e preset with a v5p-style 3-D topology is rejected, naming v6e's valid ones.
    problems = problems_of(topology="2x2x2")
    assert any("not a topology of TPU v6e" in problem for problem in problems)


def test_an_unknown_preset_is_one_problem_without_a_wrong_hint_about_dcn_subnets():
    problems = problems_of(preset="gpt")
    assert len(problems) == 1 and problems[0].startswith("preset = 'gpt' is not valid")


def test_a_head_machine_with_room_for_the_head_alone_fits_a_stack_that_does_not_scale():
    """The autoscaler's sidecar runs in the head pod only where slices scale (minSlices < slices)."""
    fixed = parse(headMachineType="n2-custom-16-19456", minSlices="2")
    assert fixed.head_machine_type == "n2-custom-16-19456" and not fixed.autoscales
    with pytest.raises(SettingsError, match=r"head's and its autoscaler's requests of 16\.5 GiB"):
        parse(headMachineType="n2-custom-16-19456", minSlices="1")


def test_the_typed_reading_the_cross_checks_use_is_the_settings_class_itself():
    """parse_settings' checks read a partial StackSettings (domain/setting.py `Reading.partial`): the
    settings' own attributes and properties, None where unset or refused, no restated twin. A later
    refusal reaches the partial without changing a frozen object."""
    reading = read(StackSettings, {**VALID, "slices": "0"}, project_name=PROJECT)
    partial = reading.partial(PartialStackSettings)
    assert isinstance(partial, StackSettings)
    assert (partial.zone, partial.slices, partial.reservation, partial.min_slices) == ("us-east5-b", None, None, 0)
    assert not reading.ok("slices") and reading.ok("zone") and reading.key("min_slices") == "minSlices"
    assert not reading.ok(StackSettings.slices) and reading.key(StackSettings.min_slices) == "minSlices"
    with pytest.raises(KeyError):
        reading.ok("minSlices")  # a field, not a key: a mistake, not "read without a problem"
    reading.refuse(StackSettings.zone)
    assert partial.zone is None and reading.values["zone"] == "us-east5-b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        partial.zone = "us-east5-a"  # type: ignore[misc]
