"""Cloud Storage: the checkpoint bucket stays private, and only the Ray pods' Workload Identity
principal gets (non-admin) access to it. The dataset bucket, which the stack does not create, is
only read. The compilation cache in the checkpoint bucket is code the jobs run (JAX loads what it
finds there as compiled programs): only the job's own principal may write it, in a bucket the
stack creates.

Checkpoints of a 70B model are the most expensive thing the project produces; a public or
over-granted bucket leaks them, or lets someone delete them.
"""

from __future__ import annotations

import json
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    StackValidationArgs,
)

from domain.resources.gcp_resources import DATASET_ROLE
from policies.rules.common import (
    BUCKET,
    RAY_CLUSTER,
    UNKNOWN,
    StackResource,
    StackView,
    at,
    described,
    known,
    on,
    plain,
)
from policies.rules.declare import Rules
from policies.rules.raycluster_props import CompileCache, compile_caches, dataset_buckets

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()

# Resources that grant IAM roles on a bucket (or a managed folder in one), by how they hold
# their grants: one member, a member list, or a whole policy document.
IAM_KINDS = {
    "gcp:storage/bucketIAMMember:BucketIAMMember": "Bucket IAM member",
    "gcp:storage/bucketIAMBinding:BucketIAMBinding": "Bucket IAM binding",
    "gcp:storage/bucketIAMPolicy:BucketIAMPolicy": "Bucket IAM policy",
    "gcp:storage/managedFolderIamMember:ManagedFolderIamMember": "Managed folder IAM member",
    "gcp:storage/managedFolderIamBinding:ManagedFolderIamBinding": "Managed folder IAM binding",
    "gcp:storage/managedFolderIamPolicy:ManagedFolderIamPolicy": "Managed folder IAM policy",
}
# Legacy ACL resources: `roleEntities` (`ROLE:entity`), an `entity`, or a predefined ACL.
ACL_KINDS = {
    "gcp:storage/bucketACL:BucketACL": "Bucket ACL",
    "gcp:storage/defaultObjectACL:DefaultObjectACL": "Default object ACL",
    "gcp:storage/objectACL:ObjectACL": "Object ACL",
    "gcp:storage/bucketAccessControl:BucketAccessControl": "Bucket access control",
    "gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl": "Default object access control",
    "gcp:storage/objectAccessControl:ObjectAccessControl": "Object access control",
}
PUBLIC_PRINCIPALS = ("allUsers", "allAuthenticatedUsers")
# Predefined ACLs that open objects to one of the public principals.
PUBLIC_PREDEFINED_ACLS = {
    "publicRead": "allUsers",
    "publicReadWrite": "allUsers",
    "authenticatedRead": "allAuthenticatedUsers",
}
# Roles that can change who has access or delete the bucket itself.
ADMIN_ROLES = (
    "roles/owner",
    "roles/editor",
    "roles/storage.admin",
    "roles/storage.objectAdmin",
    "roles/storage.folderAdmin",
    "roles/storage.legacyBucketOwner",
    "roles/storage.legacyObjectOwner",
)
WORKLOAD_IDENTITY_PREFIXES = (
    "principal://iam.googleapis.com/projects/",
    "principalSet://iam.googleapis.com/projects/",
)
# Roles that only read a bucket's objects (and its metadata): the ones a grant on the dataset bucket
# may carry.
READ_ONLY_ROLES = (
    DATASET_ROLE,
    "roles/storage.legacyObjectReader",
    "roles/storage.legacyBucketReader",
)
CHECKPOINT_ROLE_HINT = (
    "Grant roles/storage.objectUser to the Ray pods' Workload Identity principal "
    "(principal://iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/"
    "PROJECT.svc.id.goog/subject/ns/NAMESPACE/sa/KSA)"
)


def _grants(resource_type: str, props: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(role, member) pairs a storage IAM resource grants; values may be UNKNOWN."""
    if resource_type.endswith(("IAMBinding", "IamBinding")):
        role, members = at(props, "role"), at(props, "members")
        return [(role, member) for member in members] if isinstance(members, list) else []
    if resource_type.endswith(("IAMPolicy", "IamPolicy")):
        document = at(props, "policyData")
        try:
            bindings = json.loads(document).get("bindings", []) if isinstance(document, str) else []
        except (ValueError, AttributeError):
            return []
        return [
            (binding.get("role", UNKNOWN), member)
            for binding in bindings
            if isinstance(binding, dict)
            for member in binding.get("members", [])
        ]
    return [(at(props, "role"), at(props, "member"))]


def _acl_entities(props: dict[str, Any]) -> list[Any]:
    entities = []
    role_entities = at(props, "roleEntities")
    if isinstance(role_entities, list):
        entities += [e.split(":", 1)[-1] if isinstance(e, str) else UNKNOWN for e in role_entities]
    entities.append(at(props, "entity"))
    for key in ("predefinedAcl", "defaultAcl"):
        acl = at(props, key)
        entities.append(PUBLIC_PREDEFINED_ACLS.get(acl, UNKNOWN) if isinstance(acl, str) else UNKNOWN)
    return entities


def _bucket(args: ResourceValidationArgs) -> tuple[dict[str, Any], str] | None:
    if args.resource_type != BUCKET:
        return None
    props = plain(args.props)
    return props, described("Bucket", args.name, props)


@RULES.resource(
    "storage-bucket-uniform-access",
    EnforcementLevel.MANDATORY,
    "Buckets use uniform bucket-level access (no per-object ACLs).",
)
@on(_bucket)
def uniform_access(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Per-object ACLs are how objects of a private bucket end up public."""
    if at(props, "uniformBucketLevelAccess") is False:
        report_violation(
            f"{label} allows per-object ACLs (uniform bucket-level access is off), so a "
            "single object can be made public. Set uniform_bucket_level_access=True.",
            args.urn,
        )


@RULES.resource(
    "storage-bucket-public-access-prevention",
    EnforcementLevel.MANDATORY,
    "Buckets enforce public access prevention.",
)
@on(_bucket)
def public_access_prevention(
    props: dict[str, Any], label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Public access prevention blocks allUsers grants even when someone adds one later."""
    prevention = at(props, "publicAccessPrevention")
    if known(prevention) and prevention != "enforced":
        report_violation(
            f"{label} has public access prevention {prevention!r}: any later allUsers grant "
            "would publish the checkpoints. Set public_access_prevention='enforced'.",
            args.urn,
        )


@RULES.resource(
    "storage-no-public-members",
    EnforcementLevel.MANDATORY,
    "No storage IAM grant or ACL names allUsers or allAuthenticatedUsers.",
)
def no_public_members(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """allUsers and allAuthenticatedUsers mean anyone with (or without) a Google account."""
    kind = IAM_KINDS.get(args.resource_type) or ACL_KINDS.get(args.resource_type)
    if kind is None:
        return
    props = plain(args.props)
    if args.resource_type in IAM_KINDS:
        principals = [member for _, member in _grants(args.resource_type, props)]
    else:
        principals = _acl_entities(props)
    for principal in sorted({p for p in principals if p in PUBLIC_PRINCIPALS}):
        report_violation(
            f"{described(kind, args.name, props)} grants access to {principal}: "
            f"anyone could read or overwrite the checkpoints. Remove {principal}. "
            f"{CHECKPOINT_ROLE_HINT}.",
            args.urn,
        )


def _iam_grants(args: ResourceValidationArgs) -> tuple[str, list[tuple[Any, Any]]] | None:
    """(label, (role, member) pairs) of a storage IAM resource."""
    kind = IAM_KINDS.get(args.resource_type)
    if kind is None:
        return None
    props = plain(args.props)
    return described(kind, args.name, props), _grants(args.resource_type, props)


@RULES.resource(
    "storage-no-admin-roles",
    EnforcementLevel.MANDATORY,
    "No admin, owner or editor role is granted on buckets.",
)
@on(_iam_grants)
def no_admin_roles(
    label: str, grants: list[tuple[Any, Any]], args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """An admin role can re-grant access or delete the bucket and every checkpoint in it."""
    for role in sorted({r for r, _ in grants if r in ADMIN_ROLES}):
        report_violation(
            f"{label} grants {role}, which can change "
            "access to the bucket or delete it with every checkpoint. "
            f"{CHECKPOINT_ROLE_HINT}, which reads and writes objects only.",
            args.urn,
        )


@RULES.resource(
    "storage-workload-identity-members",
    EnforcementLevel.MANDATORY,
    "Bucket access is granted only to Workload Identity principals.",
)
@on(_iam_grants)
def workload_identity_members(
    label: str, grants: list[tuple[Any, Any]], args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Access goes to pods through Workload Identity: no user, group or key-holding account."""
    for member in sorted(
        {
            m
            for _, m in grants
            if isinstance(m, str)
            and m not in PUBLIC_PRINCIPALS  # reported by storage-no-public-members
            and not (m.startswith(WORKLOAD_IDENTITY_PREFIXES) and "/workloadIdentityPools/" in m)
        }
    ):
        report_violation(
            f"{label} grants access to {member!r}, "
            "which is not a Workload Identity principal: its credentials live outside the "
            f"cluster (a user, a group, or a service account and its keys). {CHECKPOINT_ROLE_HINT}.",
            args.urn,
        )


@RULES.stack(
    "storage-dataset-bucket-read-only",
    EnforcementLevel.MANDATORY,
    "Grants on the dataset bucket (mounted at the dataset root, or read-only, by a RayCluster) only read it.",
)
def dataset_bucket_read_only(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """The dataset bucket (datasetBucket: the bucket a RayCluster mounts at the dataset root, or
    mounts read-only) is data the jobs only train on, in a bucket the stack does not create: the
    Ray pods may read it, never write, delete or re-grant it."""
    stack = StackView(args.resources)
    datasets = {bucket for cluster in stack.of_type(RAY_CLUSTER) for bucket in dataset_buckets(cluster.props)}
    for resource_type, kind in IAM_KINDS.items():
        for grant in stack.of_type(resource_type):
            bucket = at(grant.props, "bucket")
            if not isinstance(bucket, str) or bucket not in datasets:
                continue
            roles = {role for role, _ in _grants(resource_type, grant.props)}
            for role in sorted(r for r in roles if isinstance(r, str) and r not in READ_ONLY_ROLES):
                report_violation(
                    f"{described(kind, grant.name, grant.props)} grants {role} on bucket {bucket!r}, the dataset bucket "
                    "the Ray workers mount read-only: a role beyond reading lets the Ray pods change or delete data "
                    f"they only train on, in a bucket the stack does not own. Grant {DATASET_ROLE} on it instead.",
                    grant.urn,
                )


def _is_writer(member: str, cache: CompileCache) -> bool:
    suffix = cache.writer_suffix
    return (
        suffix is not None
        and member.startswith(WORKLOAD_IDENTITY_PREFIXES[0])
        and "/workloadIdentityPools/" in member
        and member.endswith(suffix)
    )


@RULES.stack(
    "storage-compile-cache-writers",
    EnforcementLevel.MANDATORY,
    "Only the job's own Workload Identity principal is granted more than reading on the bucket that holds the compilation cache.",
)
def compile_cache_writers(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """JAX loads whatever it finds in the compilation cache as the job's compiled programs, so
    whoever can write the cache's bucket can run code in every job: no grant on that bucket (or a
    managed folder in it) gives a role beyond reading to anyone but the job's own Workload
    Identity principal, that of the Ray pods' service account in their namespace."""
    stack = StackView(args.resources)
    caches: dict[str, list[CompileCache]] = {}
    for cluster in stack.of_type(RAY_CLUSTER):
        for cache in compile_caches(cluster.props):
            caches.setdefault(cache.bucket, []).append(cache)
    for resource_type, kind in IAM_KINDS.items():
        for grant in stack.of_type(resource_type):
            bucket = at(grant.props, "bucket")
            if not isinstance(bucket, str) or bucket not in caches:
                continue
            if any(cache.writer_suffix is None for cache in caches[bucket]):
                continue  # whose pods these are is not known yet
            for role, member in _grants(resource_type, grant.props):
                if not (isinstance(role, str) and isinstance(member, str)) or role in READ_ONLY_ROLES:
                    continue
                if (
                    role in ADMIN_ROLES
                    or member in PUBLIC_PRINCIPALS
                    or not member.startswith(WORKLOAD_IDENTITY_PREFIXES)
                ):
                    continue  # refused whatever the bucket holds: storage-no-admin-roles, -no-public-members, -workload-identity-members
                if any(_is_writer(member, cache) for cache in caches[bucket]):
                    continue
                cache = caches[bucket][0]
                report_violation(
                    f"{described(kind, grant.name, grant.props)} grants {role} on bucket {bucket!r} to {member!r}, "
                    f"but the bucket holds the jobs' compilation cache ({cache.url}, {cache.where}): JAX runs "
                    "what it finds there as compiled code, so anyone who can write it can run code in the job. "
                    f"Grant only the Ray pods' own Workload Identity principal (...{cache.writer_suffix}) a role "
                    f"that writes, and others at most {DATASET_ROLE}.",
                    grant.urn,
                )


def _could_be(bucket: StackResource, name: str, cluster: StackResource) -> bool:
    """Whether `bucket` may be the bucket named `name`: by its name, or, with its name not known
    yet (the provider's auto-naming), by the RayCluster's dependency on it."""
    own = at(bucket.props, "name")
    if isinstance(own, str):
        return own == name
    dependencies = {dependency.urn for dependency in cluster.resource.dependencies}
    return not dependencies or bucket.urn in dependencies  # none listed: it cannot be told


@RULES.stack(
    "storage-compile-cache-own-bucket",
    EnforcementLevel.MANDATORY,
    "The compilation cache is in a bucket the stack creates, never the dataset bucket or one it does not create.",
)
def compile_cache_own_bucket(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """A compilation cache in a bucket the stack does not create (or in the dataset bucket, which
    others fill) may be written by whoever else has access to that bucket: its grants are not in
    this stack, so neither this pack nor the stack can hold them to the job's principal."""
    stack = StackView(args.resources)
    buckets = stack.of_type(BUCKET)
    for cluster in stack.of_type(RAY_CLUSTER):
        datasets = dataset_buckets(cluster.props)
        for cache in compile_caches(cluster.props):
            if cache.bucket in datasets:
                why = "is the dataset bucket, which the stack only reads and others write"
            elif not any(_could_be(bucket, cache.bucket, cluster) for bucket in buckets):
                why = "is not a bucket this stack creates, so others may write it under grants this stack cannot see"
            else:
                continue
            report_violation(
                f"{described('RayCluster', cluster.name, cluster.props)}: the compilation cache of {cache.where} is "
                f"{cache.url}, and bucket {cache.bucket!r} {why}; JAX runs what it finds in the cache as compiled "
                "code, so anyone who can write it can run code in the job. Keep the cache in the checkpoint bucket "
                "the stack creates.",
                cluster.urn,
            )
