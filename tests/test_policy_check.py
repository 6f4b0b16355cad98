"""`python -m policies.check`: the pack on every shipped stack, offline, as a PR without cloud
credentials runs it."""

from __future__ import annotations

import pytest

from policies import check


@pytest.mark.parametrize(
    "argv",
    [
        ["--project", "infra", "--stack", "dev"],
        ["--project", "infra", "--stack", "dev", "--set", "mode=autopilot"],
        ["--project", "workloads", "--stack", "dev"],
        ["--project", "workloads", "--stack", "local"],
    ],
    ids=["infra-dev", "infra-dev-autopilot", "workloads-dev", "workloads-local"],
)
def test_every_shipped_stack_passes(argv, capsys):
    assert check.main(argv) == 0, capsys.readouterr().out
    assert "0 mandatory" in capsys.readouterr().out


def test_a_production_stack_without_deletion_protection_is_refused_before_the_pack_runs(capsys):
    # The settings refuse it first (the pack's rule still guards clusters built any other way;
    # tests/test_policy_rules.py exercises it on its own).
    assert check.main(["--stack", "dev", "--set", "production=true"]) == 2
    assert "production = true but deletionProtection is false" in capsys.readouterr().err
    protected = ["--set", "production=true", "--set", "deletionProtection=true", "--set", "bucketForceDestroy=false"]
    assert check.main(["--stack", "dev", *protected]) == 0


def test_a_job_that_cannot_fit_fails_before_any_tpu_is_provisioned(capsys):
    procedure_70b = '{"weight_dtype": "float32", "remat_policy": "full"}'
    assert (
        check.main(
            [
                "--project",
                "workloads",
                "--stack",
                "dev",
                "--set",
                "preset=llama3-70b",
                "--set",
                f"maxtextOverrides={procedure_70b}",
            ]
        )
        == 1
    )
    assert "[mandatory]" in capsys.readouterr().out


def test_bad_config_is_reported_as_a_program_failure(capsys):
    assert check.main(["--stack", "dev", "--set", "slices=0"]) == 2
    assert "slices = 0 is out of range" in capsys.readouterr().err


def test_unknown_stack_is_a_usage_error():
    with pytest.raises(SystemExit):
        check.main(["--stack", "nope"])


def test_a_dcn_network_without_its_firewall_is_caught_from_the_mock_run():
    from policies.evaluate import evaluate

    resources = [
        r for r in check.resources_of(check.run_stack("infra", "dev")) if r["type"] != "gcp:compute/firewall:Firewall"
    ]
    fired = {v.policy_name for v in evaluate(resources) if v.enforcement_level == "mandatory"}
    assert fired == {"dcn-network-internal-firewall"}


def test_a_stack_policys_violation_names_the_stack_not_a_missing_resource(capsys):
    """Every slice kept up (accepted since the CLI's defaults are merged) is over the idle budget."""
    assert check.main(["--stack", "dev", "--set", "minSlices=2"]) == 0
    out = capsys.readouterr().out
    assert "[advisory] tpu-idle-budget: While no job runs, the stack keeps 32 TPU chips up" in out
    assert "\n    the stack dev as a whole\n" in out and "None" not in out
