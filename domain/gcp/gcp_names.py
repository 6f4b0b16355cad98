"""Google Cloud's naming rules as pure checks, so a bad name stops the stack before the cloud does.

Each `*_problems(value)` returns every reason `value` is not a valid name of its kind (an empty
list when it is), phrased to follow "<setting> = <value> ...: "; the matching `*_RULE` says what
is valid, phrased to follow "use ". `domain/stack_settings.py` joins them into messages that name the
setting; a declarative table of settings can point at them by name.

Every rule is the service's documented one (sources: docs/reference.md, "Google Cloud naming
rules"). Nothing here asks the cloud, so a name can still be refused for being taken or missing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_LOWER_DIGITS_HYPHEN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def _quoted(characters: set[str]) -> str:
    return " ".join(repr(character) for character in sorted(characters))


def rfc1035_problems(value: str, *, max_length: int, min_length: int = 1) -> list[str]:
    """RFC 1035 labels as Google Cloud applies them: `[a-z]([-a-z0-9]*[a-z0-9])?`, bounded length."""
    if not value:
        return ["is empty"]
    problems = []
    if len(value) > max_length:
        problems.append(f"is {len(value)} characters long (at most {max_length})")
    if len(value) < min_length:
        problems.append(f"is {len(value)} characters long (at least {min_length})")
    if any(character.isupper() for character in value):
        problems.append("has uppercase letters")
    others = {character for character in value.lower() if character not in _LOWER_DIGITS_HYPHEN}
    if others:
        problems.append(f"has characters other than lowercase letters, digits and '-': {_quoted(others)}")
    if not ("a" <= value[0].lower() <= "z"):
        problems.append("does not start with a letter")
    if value[-1] == "-":
        problems.append("ends with '-'")
    return problems


def _rfc1035_rule(max_length: int, min_length: int = 1) -> str:
    return (
        f"{min_length}-{max_length} lowercase letters, digits and '-', starting with a letter and not ending with '-'"
    )


COMPUTE_NAME_MAX = 63
COMPUTE_NAME_RULE = _rfc1035_rule(COMPUTE_NAME_MAX)


def compute_name_problems(name: str) -> list[str]:
    return rfc1035_problems(name, max_length=COMPUTE_NAME_MAX)


# A reservation shared from another project is named by its path.
RESERVATION_RULE = f"a reservation name ({COMPUTE_NAME_RULE}), or projects/PROJECT_ID/reservations/NAME for a reservation shared from another project"
_SHARED_RESERVATION = re.compile(r"projects/([^/]*)/reservations/([^/]*)")


def reservation_problems(value: str) -> list[str]:
    shared = _SHARED_RESERVATION.fullmatch(value)
    if shared:
        owner, name = shared.groups()
        return [f"names project {owner!r}, which {problem}" for problem in project_id_problems(owner)] + [
            f"names reservation {name!r}, which {problem}" for problem in compute_name_problems(name)
        ]
    if "/" in value:
        return ["is a path; give the reservation's name, or projects/PROJECT_ID/reservations/NAME for a shared one"]
    return compute_name_problems(value)


# A Compute Engine disk image as a GKE node pool's secondary boot disk takes it: the forms GKE's
# "Use secondary boot disks to preload data or container images" page passes to
# `--secondary-boot-disk=disk-image=...`, the project's own image or another project's by its path
# (the Container API's `diskImage` is the image's resource path; gcloud sends the text as given).
DISK_IMAGE_RULE = (
    f"global/images/NAME for a disk image of this project, or projects/PROJECT_ID/global/images/NAME for one "
    f"of another project (NAME: {COMPUTE_NAME_RULE})"
)
_DISK_IMAGE = re.compile(r"(?:projects/([^/]*)/)?global/images/([^/]*)")


def disk_image_problems(value: str) -> list[str]:
    path = _DISK_IMAGE.fullmatch(value)
    if path is None:
        return ["is neither of the two forms GKE takes (a bare name, a URL or an image family is not one)"]
    owner, name = path.groups()
    problems = [] if owner is None else [f"names project {owner!r}, which {p}" for p in project_id_problems(owner)]
    return problems + [f"names image {name!r}, which {problem}" for problem in compute_name_problems(name)]


# A URL or path belongs to Shared VPC, which needs a subnetwork this stack does not set.
NETWORK_RULE = f"the bare name of a VPC network in the project ({COMPUTE_NAME_RULE}), for example default"


def network_name_problems(name: str) -> list[str]:
    if "/" in name:
        return ["is a path or URL; give the bare network name"]
    return compute_name_problems(name)


GKE_CLUSTER_NAME_MAX = 40
GKE_CLUSTER_NAME_RULE = _rfc1035_rule(GKE_CLUSTER_NAME_MAX)


def gke_cluster_name_problems(name: str) -> list[str]:
    return rfc1035_problems(name, max_length=GKE_CLUSTER_NAME_MAX)


# gcloud's bound; the REST reference does not restate it.
NODE_POOL_NAME_MAX = 40
NODE_POOL_NAME_RULE = _rfc1035_rule(NODE_POOL_NAME_MAX)


def node_pool_name_problems(name: str) -> list[str]:
    return rfc1035_problems(name, max_length=NODE_POOL_NAME_MAX)


SERVICE_ACCOUNT_ID_MIN = 6
SERVICE_ACCOUNT_ID_MAX = 30
SERVICE_ACCOUNT_ID_RULE = _rfc1035_rule(SERVICE_ACCOUNT_ID_MAX, SERVICE_ACCOUNT_ID_MIN)


def service_account_id_problems(account_id: str) -> list[str]:
    return rfc1035_problems(account_id, max_length=SERVICE_ACCOUNT_ID_MAX, min_length=SERVICE_ACCOUNT_ID_MIN)


ARTIFACT_REPOSITORY_ID_MAX = 63
ARTIFACT_REPOSITORY_ID_RULE = _rfc1035_rule(ARTIFACT_REPOSITORY_ID_MAX)


def artifact_repository_id_problems(repository_id: str) -> list[str]:
    return rfc1035_problems(repository_id, max_length=ARTIFACT_REPOSITORY_ID_MAX)


# International (lowercase) characters are allowed too.
LABEL_VALUE_MAX = 63
LABEL_VALUE_RULE = f"at most {LABEL_VALUE_MAX} lowercase letters, digits, '_' and '-'"


def label_value_problems(value: str) -> list[str]:
    problems = []
    if len(value) > LABEL_VALUE_MAX:
        problems.append(f"is {len(value)} characters long (at most {LABEL_VALUE_MAX})")
    if any(character.isupper() for character in value):
        problems.append("has uppercase letters")
    others = {c for c in value if not (c.islower() or c.isdigit() or c in "_-") and not c.isupper()}
    if others:
        problems.append(f"has characters other than lowercase letters, digits, '_' and '-': {_quoted(others)}")
    return problems


LABEL_KEY_MAX = 63
LABELS_MAX = 64
LABELS_RULE = (
    f"at most {LABELS_MAX} labels, each key 1-{LABEL_KEY_MAX} lowercase letters, digits, '_' and '-' starting with a "
    f"letter, each value {LABEL_VALUE_RULE}"
)


def label_key_problems(key: str) -> list[str]:
    problems = []
    if not 1 <= len(key) <= LABEL_KEY_MAX:
        problems.append(f"is {len(key)} characters long (1 to {LABEL_KEY_MAX})")
    if key and not key[0].islower():
        problems.append("does not start with a lowercase letter")
    problems += [problem for problem in label_value_problems(key) if not problem.startswith("is ")]
    return problems


def labels_problems(labels: Mapping[str, Any]) -> list[str]:
    """Why GCP refuses these labels on a resource: each key and value, and their number."""
    problems = [] if len(labels) <= LABELS_MAX else [f"has {len(labels)} labels (at most {LABELS_MAX})"]
    for key, value in labels.items():
        key_problems = label_key_problems(str(key))
        if key_problems:
            problems.append(f"has the key {str(key)!r}, which {', '.join(key_problems)}")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            problems.append(f"has {str(key)!r} = {value!r}, which is not text")
            continue
        value_problems = label_value_problems(str(value))
        if value_problems:
            problems.append(f"has {str(key)!r} = {str(value)!r}, whose value {', '.join(value_problems)}")
    return problems


# Legacy domain-scoped ids (`example.com:my-project`) are checked after the colon. The rule
# against restricted strings ("google", ...) binds new projects only, so it is not applied.
PROJECT_ID_MIN = 6
PROJECT_ID_MAX = 30
PROJECT_ID_RULE = (
    f"the project ID ({PROJECT_ID_MIN}-{PROJECT_ID_MAX} lowercase letters, digits and '-', starting with a "
    "letter and not ending with '-'), not its display name or number; `gcloud projects list` shows it"
)
_DOMAIN_SCOPE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+:")


def project_id_problems(project: str) -> list[str]:
    if project.isdigit():
        return ["is a project number, not a project ID"]
    if any(character.isspace() for character in project) or any(character.isupper() for character in project):
        return ["looks like a project's display name (it has spaces or uppercase letters), not its ID"]
    scope = _DOMAIN_SCOPE.match(project)
    project_id = project[scope.end() :] if scope else project
    return rfc1035_problems(project_id, max_length=PROJECT_ID_MAX, min_length=PROJECT_ID_MIN)


# Google does not publish its "close misspellings" of google: _GOOGLE_LIKE covers the documented
# example, and a name can still be refused for one not caught here.
BUCKET_NAME_MIN = 3
BUCKET_NAME_MAX = 63
BUCKET_DOTTED_NAME_MAX = 222
_BUCKET_NAME_SHAPE = (
    f"{BUCKET_NAME_MIN}-{BUCKET_NAME_MAX} lowercase letters, digits, '-', '_' and '.', starting and ending with "
    f"a letter or digit (a name with dots may have up to {BUCKET_DOTTED_NAME_MAX}, 1 to {BUCKET_NAME_MAX} "
    "between dots, none of them starting or ending with '-'), not an IP address, not starting with 'goog' and not containing 'google'"
)
BUCKET_NAME_RULE = f"{_BUCKET_NAME_SHAPE}; or leave bucketName unset for a generated name"
# A bucket the stack reads but never creates (datasetBucket).
EXISTING_BUCKET_NAME_RULE = f"the name of the existing bucket, as Cloud Storage shows it: {_BUCKET_NAME_SHAPE}"
_BUCKET_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")
_IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}")
_GOOGLE_LIKE = re.compile(r"g[o0]{2,}g+[l1]e|g[o0]{2,}ge[l1]")


def bucket_name_problems(name: str) -> list[str]:
    if name.startswith("gs://"):
        return ["is a gs:// URL; give the bare bucket name, without gs:// or a path"]
    if "/" in name:
        return ["has a '/'; give the bucket name alone, without a path"]
    if not name:
        return ["is empty"]
    problems = []
    dotted = "." in name
    limit = BUCKET_DOTTED_NAME_MAX if dotted else BUCKET_NAME_MAX
    if len(name) > limit:
        problems.append(f"is {len(name)} characters long (at most {limit}{' with dots' if dotted else ''})")
    if len(name) < BUCKET_NAME_MIN:
        problems.append(f"is {len(name)} characters long (at least {BUCKET_NAME_MIN})")
    parts = name.split(".")
    if dotted and any(len(part) > BUCKET_NAME_MAX for part in parts):
        problems.append(f"has a part between dots longer than {BUCKET_NAME_MAX} characters")
    # A name with dots must be a valid DNS name: no empty label, none starting or ending with '-'.
    if dotted and "" in parts[1:-1]:
        problems.append("has an empty part between dots ('..'), which a DNS name cannot have")
    elif dotted and any(part.startswith("-") or part.endswith("-") for part in parts):
        problems.append("has a part between dots that starts or ends with '-', which a DNS name cannot have")
    if any(character.isupper() for character in name):
        problems.append("has uppercase letters")
    others = {character for character in name.lower() if character not in _BUCKET_CHARACTERS}
    if others:
        problems.append(f"has characters other than lowercase letters, digits, '-', '_' and '.': {_quoted(others)}")
    if not name[0].isalnum() or not name[-1].isalnum():
        problems.append("does not start and end with a letter or digit")
    if _IPV4.fullmatch(name):
        problems.append("is an IP address")
    if name.lower().startswith("goog"):
        problems.append("starts with 'goog', which Cloud Storage reserves")
    elif _GOOGLE_LIKE.search(name.lower().replace(".", "")):
        problems.append("contains 'google' or a close misspelling of it, which Cloud Storage refuses")
    return problems


# Checked by shape, not against a list, which changes by zone and month (GKE names the valid ones).
MACHINE_TYPE_RULE = (
    "a Compute Engine machine type name, for example n1-standard-16, e2-standard-8, n2-highmem-32, "
    "c3-standard-22 or n2-custom-8-32768"
)
_SERIES = r"[a-z][a-z0-9]*\d[a-z]?"
_MACHINE_TYPE = re.compile(
    rf"(?:{_SERIES}-(?!custom-)[a-z]+-\d+[a-z]?(?:-[a-z]+){{0,2}}"
    rf"|{_SERIES}-(?:micro|small|medium)"
    rf"|(?:{_SERIES}-)?custom-(?:(?:micro|small|medium)-\d+|\d+-\d+)(?:-ext)?)"
)


def machine_type_problems(machine_type: str) -> list[str]:
    if "/" in machine_type:
        return ["is a path or URL; give the bare machine type name"]
    if machine_type != machine_type.lower():
        return ["has uppercase letters (machine type names are lowercase)"]
    if not _MACHINE_TYPE.fullmatch(machine_type):
        return ["does not have the shape of a machine type (SERIES-FAMILY-VCPUS, or SERIES-custom-VCPUS-MEMORY_MB)"]
    return []
