"""Thin component resources: each wires the resources of one concern, parented to itself.

Each takes `(name, args, opts)`: a small frozen args class with the values it uses, built from
the settings by its `from_settings`, and the usual resource options. One component waits for
another through `opts=pulumi.ResourceOptions(depends_on=[other])`: the SDK expands a component in
`depends_on` into the custom resources under it (`_add_dependency` in pulumi/runtime/rpc.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def child_options(component: pulumi.ComponentResource, opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions:
    """A child's options: parented to `component` and waiting for what the component waits for.

    The component's own registration already waits for its `depends_on`, and its children for
    their parent's registration; but a resource's recorded dependencies come from its own options
    only (they are what the stack's state keeps, and what the stack policies and the tests read),
    so each child carries them itself.
    """
    return pulumi.ResourceOptions(parent=component, depends_on=opts.depends_on if opts else None)


def manifest_resource(
    name: str, manifest: Mapping[str, Any], opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource:
    """Any manifest (built-in kinds too) as a resource; its type token comes from apiVersion/kind."""
    return k8s.apiextensions.CustomResource(
        name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=manifest["metadata"],
        spec=manifest["spec"],
        opts=opts,
    )
