"""Ray token authentication on the RayCluster: KubeRay's name for the token's Secret, the
RayCluster's authOptions and rayVersion on every shape, the stack outputs that tell clients
where the token is without carrying it, and a directly reached head getting a token only once it
has answered as a Ray dashboard that asks for one."""

from __future__ import annotations

import pytest

from domain.ray.ray_version import RAY_VERSION
from domain.resources import kuberay


@pytest.mark.parametrize(
    "cluster_name, secret_name",
    [
        ("maxtext-tpu-cluster", "maxtext-tpu-cluster"),
        ("r", "r"),
        # Exactly 50 characters: kept whole.
        ("a" * 50, "a" * 50),
        # Longer than 50 (63 here): KubeRay keeps the last 50, not the first.
        (
            "llama3-70b-multislice-training-cluster-for-team-vision-research",
            "ltislice-training-cluster-for-team-vision-research",
        ),
        ("x" + "b" * 50, "b" * 50),
        # 54, cut to "-2-llama3...": the leading "-" becomes "r".
        (
            "prod-2-llama3-70b-multislice-training-run-cluster-west",
            "r2-llama3-70b-multislice-training-run-cluster-west",
        ),
        # A leading digit becomes "r".
        ("70b-cluster", "r0b-cluster"),
        ("8", "r"),
        # Cut to 50, the name may start with a digit or a punctuation character: "r" too.
        ("cluster-7" + "c" * 49, "r" + "c" * 49),
        ("cluster-" + "c" * 49, "r" + "c" * 49),
        ("cluster." + "c" * 49, "r" + "c" * 49),
    ],
)
def test_secret_name_follows_kuberay_check_name(cluster_name, secret_name):
    assert kuberay.ray_auth_secret_name(cluster_name) == secret_name


def test_secret_name_defaults_to_the_deployed_cluster():
    assert kuberay.ray_auth_secret_name() == kuberay.ray_auth_secret_name(kuberay.RAY_CLUSTER_NAME)
    assert kuberay.RAY_AUTH_TOKEN_KEY == "auth_token"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_project_ray_supports_token_auth():
    """KubeRay refuses authOptions unless rayVersion is at least 2.52.0."""
    assert _version(RAY_VERSION) >= _version(kuberay.MIN_RAY_VERSION_FOR_TOKEN_AUTH)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"slices": 1}, {"mode": "autopilot"}, {"namespace": "training", "serviceAccount": "trainer"}],
    ids=["standard", "one-slice", "autopilot", "namespace"],
)
def test_the_ray_cluster_asks_kuberay_for_a_token(infra_run, overrides):
    run = infra_run(**overrides)
    [ray_cluster] = run.custom_resources("RayCluster")
    spec = ray_cluster.inputs["spec"]
    assert spec["authOptions"] == {"mode": "token"}
    # No secretName: KubeRay generates the token in the cluster, and the program creates no
    # Secret, so no token can reach the stack's state.
    assert "secretName" not in spec["authOptions"]
    assert spec["rayVersion"] == RAY_VERSION
    assert not any(r.type == "kubernetes:core/v1:Secret" for r in run.registrations)


def test_the_secret_output_is_the_name_kuberay_gives_the_secret(infra_run):
    """A name (in the `namespace` output), for clients to read the token from the cluster."""
    run = infra_run(namespace="training")
    [ray_cluster] = run.custom_resources("RayCluster")
    metadata = ray_cluster.inputs["metadata"]
    assert run.outputs["rayAuthSecret"] == kuberay.ray_auth_secret_name(metadata["name"])
    assert run.outputs["rayClusterName"] == metadata["name"]
    assert run.outputs["namespace"] == metadata["namespace"] == "training"


# ---------------------------------------------------------------- a directly reached head's token

AMBIENT_TOKEN = "token-of-another-cluster"


@pytest.mark.parametrize("status, body", [(401, "Unauthorized"), (404, "not found"), (200, "<html></html>")])
def test_the_provider_sends_no_token_to_a_server_that_has_not_answered_as_ray(status, body, monkeypatch):
    """A `pulumi up` of the local stack while something else holds its port: the shell's token,
    another cluster's perhaps, stays with the shell."""
    from tests.support.fake_jobs_api import FakeHttpServer
    from workloads.jobs_api import JobsApi

    monkeypatch.setenv("RAY_AUTH_TOKEN", AMBIENT_TOKEN)
    with FakeHttpServer(lambda _method, _path: (status, body.encode())) as holder:
        assert JobsApi(holder.address).headers() == {}
    assert [path for _, path in holder.requests] == ["/api/authentication_mode"]
    assert "authorization" not in holder.headers[0]


def test_the_provider_sends_the_token_to_a_ray_head_that_asks_for_one(monkeypatch):
    from tests.support.fake_jobs_api import FakeHttpServer
    from workloads.jobs_api import JobsApi

    monkeypatch.setenv("RAY_AUTH_TOKEN", AMBIENT_TOKEN)
    modes = {"token": {"Authorization": f"Bearer {AMBIENT_TOKEN}"}, "disabled": {}}
    for mode, headers in modes.items():
        answer = f'{{"authentication_mode": "{mode}"}}'.encode()
        with FakeHttpServer(lambda _method, _path, answer=answer: (200, answer), "application/json") as head:
            assert JobsApi(head.address).headers() == headers
        assert "authorization" not in head.headers[0]
