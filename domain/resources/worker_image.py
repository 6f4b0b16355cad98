"""The TPU worker image: its Artifact Registry repository, its content tag and its Cloud Build.

Jobs used to install maxtext[tpu] (~2.6 GB) on every worker at every start while the TPUs sat
idle. The image bakes the pinned trainer lock and the project's pure packages in once, and the
infra stack builds it with Cloud Build into a repository of its own.

The tag is a hash of what goes into the image, so an unchanged tree never rebuilds and a changed
one always gets a new tag. The repository's tags are immutable, so a tag always names the same
bytes, and the RayCluster's pod template changes exactly when the image does.

Pure: no Pulumi import. The infra component hands these values to pulumi-gcp and pulumi-command.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

from domain.gcp import resource_names
from domain.gcp.images import WORKER_IMAGE_NAME
from domain.ray.ray_version import RAY_VERSION
from domain.stack_settings import StackSettings

DOCKERFILE = "trainer/Dockerfile"
# What trainer/Dockerfile starts FROM: the project's Ray version, so the cluster and the job client
# speak the same protocol (a Dockerfile cannot import it; tests/test_worker_image.py holds the two
# together).
BASE_IMAGE = f"rayproject/ray:{RAY_VERSION}-py312"
LOCK_FILE = "requirements-trainer.txt"
# The directories the Dockerfile copies whole into the image, next to the lock it installs.
PACKAGES = ("domain", "trainer")
IMAGE_NAME = WORKER_IMAGE_NAME
TAG_LENGTH = 16
# Read by gcloud for the upload (gitignore syntax) and by Docker for the context: its patterns are
# written to mean the same in both. Without it gcloud would fall back to .gitignore, upload any
# untracked virtualenv (GBs), and write a .gcloudignore into the working tree.
IGNORE_FILE = ".dockerignore"
# `gcloud builds submit --tag` only builds a Dockerfile at the root of the uploaded source; ours is
# in trainer/ with the repository root as context, so the build goes through a config that runs
# Cloud Build's Docker builder with `--file`.
DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
# Pulling the Ray base image, installing the lock and pushing take well under this; the flag also
# overrides any `builds/timeout` the operator's gcloud has set.
BUILD_TIMEOUT = "3600s"


def _is_bytecode(path: Path) -> bool:
    """Bytecode caches are local by-products; .dockerignore keeps them out of the image too."""
    return "__pycache__" in path.parts or path.suffix == ".pyc"


def image_sources(root: Path) -> list[str]:
    """Every file that goes into the image, relative to `root`, in a stable order.

    Whole package directories, not only their *.py: the Dockerfile copies the directories, so a
    config or data file there changes the image and must change the tag.
    """
    missing = [name for name in (DOCKERFILE, LOCK_FILE) if not (root / name).is_file()]
    if missing:
        raise FileNotFoundError(f"worker image sources missing under {root}: {', '.join(missing)}")
    sources = {DOCKERFILE, LOCK_FILE}
    for package in PACKAGES:
        for path in (root / package).rglob("*"):
            if path.is_file() and not _is_bytecode(path.relative_to(root)):
                sources.add(path.relative_to(root).as_posix())
    return sorted(sources)


def content_tag(root: Path) -> str:
    """The first 16 hex digits of a SHA-256 over the image's sources, names included, so a rename
    or moving code between files changes the tag as much as an edit does."""
    digest = hashlib.sha256()
    for name in image_sources(root):
        data = (root / name).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:TAG_LENGTH]


def repository_id(cluster_name: str) -> str:
    """Named after the cluster, like the DCN networks, so two stacks in one project never share it."""
    return resource_names.artifact_repository_id(cluster_name)


def repository_args(settings: StackSettings) -> dict[str, Any]:
    """A Docker repository in the cluster's region: nodes pull without crossing regions.

    No cleanup policy: builds only happen when the sources change, `pulumi destroy` deletes the
    repository with its images, and a keep-the-newest rule could delete the image a stack rolled
    back to.
    """
    return {
        "repository_id": repository_id(settings.cluster_name),
        "project": settings.project,
        "location": settings.region,
        "format": "DOCKER",
        "description": f"Ray and MaxText worker images of {settings.cluster_name}, tagged by content.",
        "docker_config": {"immutable_tags": True},
    }


def image_uri(settings: StackSettings, tag: str) -> str:
    # Domain-scoped project ids (example.com:project) become a path in Artifact Registry URLs.
    project_path = settings.project.replace(":", "/")
    return f"{settings.region}-docker.pkg.dev/{project_path}/{repository_id(settings.cluster_name)}/{IMAGE_NAME}:{tag}"


def cloudbuild_config(image: str) -> dict[str, Any]:
    """The build: `docker build` of trainer/Dockerfile over the uploaded root, then a push of the
    listed image (Cloud Build fails the build when that push fails)."""
    return {
        "steps": [{"name": DOCKER_BUILDER, "args": ["build", "--file", DOCKERFILE, "--tag", image, "."]}],
        "images": [image],
    }


def submit_arguments(settings: StackSettings) -> list[str]:
    """`gcloud builds submit` without `--config` and the source, which the build script adds."""
    return [
        "gcloud",
        "builds",
        "submit",
        "--project",
        settings.project,
        "--region",
        settings.region,
        "--ignore-file",
        IGNORE_FILE,
        "--timeout",
        BUILD_TIMEOUT,
        # The build's log stays in Cloud Build (gcloud prints its link); stdout, which the
        # command resource keeps in state, stays a few lines long.
        "--suppress-logs",
        "--quiet",
    ]


def existence_check_arguments(settings: StackSettings, image: str) -> list[str]:
    return [
        "gcloud",
        "artifacts",
        "docker",
        "images",
        "describe",
        image,
        "--project",
        settings.project,
        "--quiet",
    ]


def build_script(settings: StackSettings, image: str) -> str:
    """A POSIX shell script, run from the repository root, that builds and pushes `image`.

    It does nothing when the tag already exists: tags are immutable, so the push would fail, and
    the command re-runs whenever its inputs change (a checkout in another directory, a new
    version of this script), not only when the tag does. The build config is written to a
    temporary directory outside the uploaded source and removed on exit. Credentials come from
    the operator's gcloud login at run time; none is written anywhere.
    """
    config = json.dumps(cloudbuild_config(image), sort_keys=True)
    return "\n".join(
        [
            "set -eu",
            f"if {shlex.join(existence_check_arguments(settings, image))} >/dev/null 2>&1; then",
            f"  echo {shlex.quote(f'{image} already exists; nothing to build')}",
            "  exit 0",
            "fi",
            'work="$(mktemp -d)"',
            "trap 'rm -rf \"$work\"' EXIT",
            f"printf '%s\\n' {shlex.quote(config)} >\"$work/cloudbuild.json\"",
            f'{shlex.join(submit_arguments(settings))} --config "$work/cloudbuild.json" .',
        ]
    )
