"""Container image references as a stack may set them (`rayImage`), checked before any node pulls.

The grammar is the one Docker, containerd and Artifact Registry parse (the distribution
project's `reference` package): `[REGISTRY[:PORT]/]PATH[:TAG][@DIGEST]`, where PATH components are
lowercase letters and digits joined by '.', '_', '__' or '-', a tag is up to 128 word characters,
'.' or '-' (not starting with '.' or '-'), and a digest is `ALGORITHM:HEX` (source: docs/deploying.md, "The image").

On top of the grammar, the stack wants an image that cannot change under it: a version tag or a
sha256 digest. A moving tag (`latest`, `nightly`, ...) would let nodes pulling at different times
run different images, and a re-deploy would not notice a new one.
"""

from __future__ import annotations

import re

from domain.ray.ray_version import RAY_VERSION

# Tags that by convention move to newer images.
MOVING_TAGS = ("latest", "nightly", "main", "master", "stable", "edge", "dev")

# The worker image's name: the stack builds trainer/Dockerfile under it, and a team that builds
# that Dockerfile itself pushes it under the same name. No other image holds MaxText and the
# trainer package the jobs run.
WORKER_IMAGE_NAME = "maxtext-ray"

IMAGE_RULE = (
    f"REGISTRY/PATH/{WORKER_IMAGE_NAME}:VERSION (for example "
    f"us-docker.pkg.dev/my-project/images/{WORKER_IMAGE_NAME}:{RAY_VERSION}-1) or "
    f"REGISTRY/PATH/{WORKER_IMAGE_NAME}@sha256:<64 hex digits>, a build of trainer/Dockerfile, or unset it to "
    "build the worker image"
)

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_DOMAIN = re.compile(
    r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*"
    r"(?::\d+)?"
)
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"\w[\w.-]{0,127}")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


def _split(image: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of a reference, the tag being after the last ':' of the last
    path component (a registry's port comes before a '/')."""
    name, at, digest = image.partition("@")
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        return name[:colon], name[colon + 1 :], digest if at else None
    return name, None, digest if at else None


def image_reference_problems(image: str) -> list[str]:
    """Every reason `image` is not a pinned image reference (empty when it is)."""
    scheme = _SCHEME.match(image)
    if scheme:
        return [f"starts with a URL scheme ({scheme.group(0)!r}), which image references do not have"]
    if not image or any(character.isspace() for character in image):
        return ["is empty or has spaces"]
    repository, tag, digest = _split(image)
    problems = []
    components = repository.split("/")
    first = components[0]
    has_registry = len(components) > 1 and ("." in first or ":" in first or first == "localhost")
    if has_registry and not _DOMAIN.fullmatch(first):
        problems.append(f"has registry {first!r}, which is not a host name (with an optional :PORT)")
    path = components[1:] if has_registry else components
    if any(component != component.lower() for component in path):
        problems.append("has uppercase letters in its repository path, which must be lowercase")
    elif not all(_PATH_COMPONENT.fullmatch(component) for component in path):
        problems.append(
            "has a repository path that is not lowercase letters and digits separated by '/', '.', '_' or '-'"
        )
    if digest is not None and not _SHA256.fullmatch(digest):
        problems.append(f"has digest {digest!r}; a digest is sha256: followed by 64 lowercase hex digits")
    if tag is not None and not _TAG.fullmatch(tag):
        problems.append(f"has tag {tag!r}, which is not 1-128 letters, digits, '_', '.' or '-'")
    if tag is None and digest is None:
        problems.append("has no tag (pin a version)")
    elif digest is None and tag is not None and tag.lower() in MOVING_TAGS:
        problems.append(
            f"has the moving tag {tag!r}: the image under it changes without the stack noticing, and nodes "
            "pulling at different times could run different images"
        )
    return problems


# Ray's own images (Docker Hub's rayproject/ray and rayproject/ray-ml) are tagged with the Ray
# they hold first: 2.60.0, 2.60.0-py312-tpu, 2.60.0.5a1b2c-py312 (a commit's build). Other
# images' tags are their owners' numbering, and a digest says nothing about the contents: their
# Ray version cannot be known before a node runs them.
RAY_REPOSITORIES = ("rayproject/ray", "rayproject/ray-ml")
_DOCKER_HUB = ("docker.io/", "index.docker.io/", "registry-1.docker.io/")
_RAY_TAG_VERSION = re.compile(r"(\d{1,4}\.\d{1,4}\.\d{1,4})(?:[-.].*)?")


def is_worker_image(image: str) -> bool:
    """Whether a (valid) reference names a build of trainer/Dockerfile, by its image name."""
    repository, _, _ = _split(image)
    return repository.rsplit("/", 1)[-1] == WORKER_IMAGE_NAME


def ray_version_of(image: str) -> str | None:
    """The Ray version a (valid) reference to one of Ray's own images names in its tag, else
    None (another repository, a digest only, or a tag that does not start with a version)."""
    repository, tag, _ = _split(image)
    for prefix in _DOCKER_HUB:
        repository = repository.removeprefix(prefix)
    repository = repository.removeprefix("library/")
    if repository not in RAY_REPOSITORIES or tag is None:
        return None
    version = _RAY_TAG_VERSION.fullmatch(tag)
    return version.group(1) if version else None


# Artifact Registry's Docker hosts: LOCATION-docker.pkg.dev, a region or a multi-region
# (us-east5-docker.pkg.dev, us-docker.pkg.dev). GKE streams images from Artifact Registry only
# (docs/deploying.md, "Image streaming").
_ARTIFACT_REGISTRY_HOST = re.compile(r"[a-z][a-z0-9-]*-docker\.pkg\.dev")


def registry_of(image: str) -> str | None:
    """The registry host of a (valid) reference, or None when it names none (Docker Hub)."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def in_artifact_registry(image: str) -> bool:
    """Whether a (valid) reference names an image in an Artifact Registry Docker repository."""
    registry = registry_of(image)
    return registry is not None and _ARTIFACT_REGISTRY_HOST.fullmatch(registry) is not None
