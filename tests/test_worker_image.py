"""The worker image: its content tag, its URI, the build script run against a stand-in gcloud,
and its wiring under Pulumi mocks (built by default, never when `rayImage` is set)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from domain.config.settings import SettingsError
from domain.ray.ray_version import RAY_VERSION
from domain.resources import gcp_resources, worker_image
from infra.program import PROJECT_ROOT
from tests.support.cli_settings import infra_settings
from tests.support.infra_program import run_infra
from tests.support.pulumi_harness import stack_config

BASE = {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"}
REPOSITORY = "gcp:artifactregistry/repository:Repository"
BUILD = "command:local:Command"
COMPONENT = "maxtext-tpu:image:WorkerImage"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
SERVICE = "gcp:projects/service:Service"
IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
DEV_PROJECT, DEV_REGION = "my-gcp-project", "us-east5"  # Pulumi.dev.yaml


def settings(**overrides):
    """`project`, `region` and `zone` are the Google provider's (gcp:KEY)."""
    qualified = {
        f"gcp:{key}" if key in ("project", "region", "zone") else key: value for key, value in overrides.items()
    }
    return infra_settings({**BASE, **qualified})


# ---------------------------------------------------------------- the content tag


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small stand-in for the repository: what goes into the image, and what does not."""
    files = {
        "trainer/Dockerfile": "FROM rayproject/ray:2.60.0-py312\n",
        "requirements-trainer.txt": "maxtext[tpu]==0.2.5\nray[default,train]==2.60.0\n",
        "trainer/__init__.py": "",
        "trainer/maxtext_trainer.py": "STEPS = 10\n",
        "domain/__init__.py": "",
        "domain/training/job.py": "NAME = 'job'\n",
        "README.md": "# readme\n",
        "tests/test_job.py": "def test(): pass\n",
        "infra/program.py": "PROGRAM = 1\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_tag_is_sixteen_hex_digits_and_stable(tree):
    tag = worker_image.content_tag(tree)
    assert re.fullmatch(r"[0-9a-f]{16}", tag)
    assert worker_image.content_tag(tree) == tag


def test_sources_are_the_dockerfile_the_lock_and_the_packages(tree):
    assert worker_image.image_sources(tree) == [
        "domain/__init__.py",
        "domain/training/job.py",
        "requirements-trainer.txt",
        "trainer/Dockerfile",
        "trainer/__init__.py",
        "trainer/maxtext_trainer.py",
    ]


@pytest.mark.parametrize(
    "change",
    [
        lambda root: (root / "trainer/maxtext_trainer.py").write_text("STEPS = 11\n"),
        lambda root: (root / "requirements-trainer.txt").write_text("maxtext[tpu]==0.2.6\n"),
        lambda root: (root / "trainer/Dockerfile").write_text("FROM rayproject/ray:2.61.0-py312\n"),
        lambda root: (root / "domain/training/presets.py").write_text("PRESETS = {}\n"),
        lambda root: (root / "trainer/config.yml").write_text("steps: 5\n"),
        lambda root: (root / "domain/training/job.py").rename(root / "domain/jobs.py"),
    ],
    ids=["trainer-code", "lock", "dockerfile", "new-domain-module", "trainer-data-file", "rename"],
)
def test_tag_changes_with_what_goes_into_the_image(tree, change):
    before = worker_image.content_tag(tree)
    change(tree)
    assert worker_image.content_tag(tree) != before


@pytest.mark.parametrize(
    "change",
    [
        lambda root: (root / "README.md").write_text("# edited\n"),
        lambda root: (root / "tests/test_job.py").write_text("def test(): assert True\n"),
        lambda root: (root / "infra/program.py").write_text("PROGRAM = 2\n"),
        lambda root: (root / "domain/__pycache__").mkdir() or (root / "domain/__pycache__/job.pyc").write_bytes(b"\0"),
    ],
    ids=["readme", "tests", "infra", "bytecode-cache"],
)
def test_tag_ignores_what_stays_out_of_the_image(tree, change):
    before = worker_image.content_tag(tree)
    change(tree)
    assert worker_image.content_tag(tree) == before


def test_a_missing_dockerfile_is_named(tree):
    (tree / "trainer/Dockerfile").unlink()
    with pytest.raises(FileNotFoundError, match="trainer/Dockerfile"):
        worker_image.content_tag(tree)


def test_the_repository_holds_every_image_source():
    sources = worker_image.image_sources(PROJECT_ROOT)
    assert {"trainer/Dockerfile", "requirements-trainer.txt", "domain/resources/worker_image.py"} <= set(sources)
    assert re.fullmatch(r"[0-9a-f]{16}", worker_image.content_tag(PROJECT_ROOT))


def test_dockerfile_installs_the_lock_and_copies_the_packages():
    dockerfile = (PROJECT_ROOT / worker_image.DOCKERFILE).read_text()
    instructions = [line for line in dockerfile.splitlines() if line and not line.startswith("#")]
    assert instructions[0] == f"FROM {worker_image.BASE_IMAGE}"
    assert "COPY requirements-trainer.txt /tmp/requirements-trainer.txt" in instructions
    assert "-r /tmp/requirements-trainer.txt" in dockerfile and "--no-cache" in dockerfile
    for package in worker_image.PACKAGES:
        assert f"COPY {package}/ /app/{package}/" in instructions
    assert "ENV PYTHONPATH=/app" in instructions


@pytest.mark.parametrize(
    "path, pin",
    [
        ("requirements.in", "ray[default,train]=={}"),  # the job client
        ("requirements.txt", "ray=={}"),
        ("requirements-trainer.in", "ray[default,train]=={}"),  # the image and the local head
        ("requirements-trainer.txt", "ray=={}"),
    ],
)
def test_every_ray_pin_is_the_project_ray_version(path, pin):
    """The files Python cannot import name the version of domain/ray/ray_version.py, which the
    image's base and the RayCluster's rayVersion (needed by KubeRay for token auth) read."""
    lines = (PROJECT_ROOT / path).read_text().splitlines()
    pins = [line.split("#")[0].strip() for line in lines if re.match(r"ray(\[|==)", line)]
    assert pins == [pin.format(RAY_VERSION)], (path, pins)


def test_build_context_leaves_out_virtualenvs_tests_and_caches():
    ignored = (PROJECT_ROOT / worker_image.IGNORE_FILE).read_text().splitlines()
    for pattern in ("/.venv*", "/.runs", "/.git", "/tests", "/benchmarks", "**/__pycache__", "**/*.pyc"):
        assert pattern in ignored, pattern
    for source in ("domain", "trainer", "requirements-trainer.txt"):
        assert not any(line.lstrip("/").startswith(source) for line in ignored), source


# ---------------------------------------------------------------- URI and build command


def test_image_uri_format():
    assert (
        worker_image.image_uri(settings(), "0123456789abcdef")
        == "us-east5-docker.pkg.dev/my-project/maxtext-tpu-images/maxtext-ray:0123456789abcdef"
    )
    assert worker_image.image_uri(settings(clusterName="research"), "t").startswith(
        "us-east5-docker.pkg.dev/my-project/research-images/"
    )
    assert "/example.com/my-project/" in worker_image.image_uri(settings(project="example.com:my-project"), "t")


def test_repository_is_docker_in_the_region_with_immutable_tags():
    assert worker_image.repository_args(settings()) == {
        "repository_id": "maxtext-tpu-images",
        "project": "my-project",
        "location": "us-east5",
        "format": "DOCKER",
        "description": "Ray and MaxText worker images of maxtext-tpu, tagged by content.",
        "docker_config": {"immutable_tags": True},
    }


def test_submit_arguments():
    assert worker_image.submit_arguments(settings()) == [
        "gcloud",
        "builds",
        "submit",
        "--project",
        "my-project",
        "--region",
        "us-east5",
        "--ignore-file",
        ".dockerignore",
        "--timeout",
        "3600s",
        "--suppress-logs",
        "--quiet",
    ]


def test_cloudbuild_config_builds_the_trainer_dockerfile_from_the_root_and_pushes():
    image = "us-east5-docker.pkg.dev/p/r/maxtext-ray:t"
    assert worker_image.cloudbuild_config(image) == {
        "steps": [
            {
                "name": "gcr.io/cloud-builders/docker",
                "args": ["build", "--file", "trainer/Dockerfile", "--tag", image, "."],
            }
        ],
        "images": [image],
    }


FAKE_GCLOUD = """#!/bin/sh
# Stands in for gcloud: records each call and a copy of the build config, exits as told.
pwd > "$FAKE_DIR/cwd"
if [ "$1" = artifacts ]; then
  printf '%s\\n' "$@" > "$FAKE_DIR/describe.args"
  exit "$FAKE_IMAGE_EXISTS_STATUS"
fi
printf '%s\\n' "$@" > "$FAKE_DIR/submit.args"
previous=
for arg in "$@"; do
  if [ "$previous" = --config ]; then cp "$arg" "$FAKE_DIR/cloudbuild.json"; fi
  previous=$arg
done
exit "$FAKE_SUBMIT_STATUS"
"""


@pytest.fixture
def run_build(tmp_path: Path):
    """Runs the build script as pulumi-command would (/bin/sh -c, from the source directory),
    with a stand-in gcloud first on the PATH."""
    if not Path("/bin/sh").exists():
        pytest.skip("no /bin/sh, the shell pulumi-command runs the script with")
    bin_dir, record, source = tmp_path / "bin", tmp_path / "record", tmp_path / "source"
    for directory in (bin_dir, record, source):
        directory.mkdir()
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(FAKE_GCLOUD)
    gcloud.chmod(gcloud.stat().st_mode | stat.S_IXUSR)

    def run(image: str, *, exists: bool = False, submit_status: int = 0):
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_DIR": str(record),
            "FAKE_IMAGE_EXISTS_STATUS": "0" if exists else "1",
            "FAKE_SUBMIT_STATUS": str(submit_status),
        }
        result = subprocess.run(
            ["/bin/sh", "-c", worker_image.build_script(settings(), image)],
            cwd=source,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        calls = {path.name: path.read_text() for path in record.iterdir()}
        return result, calls, source

    return run


IMAGE = "us-east5-docker.pkg.dev/my-project/maxtext-tpu-images/maxtext-ray:0123456789abcdef"


def test_build_script_submits_the_config_from_the_source_directory(run_build):
    result, calls, source = run_build(IMAGE)
    assert result.returncode == 0, result.stderr
    argv = calls["submit.args"].splitlines()
    assert argv[:-3] == worker_image.submit_arguments(settings())[1:]
    config_path = argv[-2]
    assert argv[-3] == "--config" and argv[-1] == "."
    assert json.loads(calls["cloudbuild.json"]) == worker_image.cloudbuild_config(IMAGE)
    assert calls["cwd"].strip() == str(source)
    # The config was written outside the uploaded source and removed afterwards.
    assert not Path(config_path).is_relative_to(source)
    assert not Path(config_path).parent.exists()
    assert calls["describe.args"].splitlines() == worker_image.existence_check_arguments(settings(), IMAGE)[1:]


def test_build_script_skips_an_image_that_already_exists(run_build):
    result, calls, _ = run_build(IMAGE, exists=True)
    assert result.returncode == 0
    assert "submit.args" not in calls
    assert "already exists" in result.stdout


def test_build_script_fails_when_the_build_fails(run_build):
    result, calls, _ = run_build(IMAGE, submit_status=1)
    assert result.returncode != 0
    assert "submit.args" in calls


# ---------------------------------------------------------------- settings


def test_ray_image_defaults_to_building_and_a_set_image_must_be_pinned():
    assert settings().ray_image is None
    pinned = "us-docker.pkg.dev/p/r/maxtext-ray@sha256:" + "0" * 64
    assert settings(rayImage=pinned).ray_image == pinned
    with pytest.raises(SettingsError, match="or unset it to build the worker image"):
        settings(rayImage="rayproject/ray")


# ---------------------------------------------------------------- the stack, under mocks


@pytest.fixture(scope="module")
def built_run():
    return run_infra(stack_config("dev"))


GIVEN_IMAGE = "us-docker.pkg.dev/my-project/images/maxtext-ray:2.60.0-1"  # a team's own build of trainer/Dockerfile


@pytest.fixture(scope="module")
def given_image_run():
    config = stack_config("dev")
    config["maxtext-tpu-infra:rayImage"] = GIVEN_IMAGE
    return run_infra(config)


def dev_settings():
    return settings(project=DEV_PROJECT, region=DEV_REGION)


def dev_image_uri() -> str:
    return worker_image.image_uri(dev_settings(), worker_image.content_tag(PROJECT_ROOT))


def ray_cluster_images(run) -> list[str]:
    spec = run.one(RAY_CLUSTER).inputs["spec"]
    containers = spec["headGroupSpec"]["template"]["spec"]["containers"]
    for group in spec["workerGroupSpecs"]:
        containers = containers + group["template"]["spec"]["containers"]
    return [container["image"] for container in containers]


def test_default_stack_builds_the_image_and_runs_it(built_run):
    uri = dev_image_uri()
    assert built_run.outputs["rayImage"] == uri
    assert ray_cluster_images(built_run) == [uri, uri]


def test_default_stack_creates_the_repository(built_run):
    repository = built_run.one(REPOSITORY).inputs
    assert (repository["repositoryId"], repository["location"], repository["format"]) == (
        "maxtext-tpu-images",
        DEV_REGION,
        "DOCKER",
    )
    assert repository["dockerConfig"] == {"immutableTags": True}
    assert dev_image_uri().startswith(f"{DEV_REGION}-docker.pkg.dev/{DEV_PROJECT}/maxtext-tpu-images/maxtext-ray:")


def test_build_reruns_on_a_new_tag_and_holds_no_credential(built_run):
    build = built_run.one(BUILD).inputs
    uri = dev_image_uri()
    assert build["triggers"] == [uri]
    assert build["create"] == worker_image.build_script(dev_settings(), uri)
    assert build["dir"] == str(PROJECT_ROOT)
    assert build["interpreter"] == ["/bin/sh", "-c"]
    assert "environment" not in build and "stdin" not in build
    assert not re.search(r"token|password|secret|key=", build["create"], re.IGNORECASE)


def test_build_waits_for_the_repository_and_the_apis(built_run):
    build = built_run.one(BUILD)
    assert built_run.one(REPOSITORY).urn in build.dependencies
    services = {s.inputs["service"]: s.urn for s in built_run.of_type(SERVICE)}
    for api in ("cloudbuild.googleapis.com", "artifactregistry.googleapis.com"):
        assert services[api] in build.dependencies, api
    assert set(services.values()) <= set(built_run.one(REPOSITORY).dependencies)


def test_ray_cluster_waits_for_the_build(built_run):
    assert built_run.one(BUILD).urn in built_run.one(RAY_CLUSTER).dependencies


def test_image_resources_live_in_their_component(built_run):
    component = built_run.one(COMPONENT)
    assert component.name == "worker-image"
    for type_token in (REPOSITORY, BUILD):
        assert built_run.one(type_token).parent == component.urn


def test_nodes_can_pull_but_not_push(built_run):
    """The node account's project-level reader role covers the new repository; it gets no more."""
    roles = {member.inputs["role"] for member in built_run.of_type(IAM_MEMBER)}
    assert "roles/artifactregistry.reader" in roles
    assert not {
        role for role in roles if role.startswith("roles/artifactregistry.") and role != "roles/artifactregistry.reader"
    }
    assert "roles/artifactregistry.reader" in gcp_resources.NODE_SERVICE_ACCOUNT_ROLES


def test_a_set_image_is_used_as_is_and_nothing_is_built(given_image_run):
    for type_token in (REPOSITORY, BUILD, COMPONENT):
        assert given_image_run.of_type(type_token) == [], type_token
    assert ray_cluster_images(given_image_run) == [GIVEN_IMAGE] * 2
    assert given_image_run.outputs["rayImage"] == GIVEN_IMAGE
