"""Every policy of the pack, one module per concern; `ALL` is what the pack serves and what
`policies.evaluate` runs by default.

Each rule is one validator function, declared where it is written with its name, description and
config keys (`policies.rules.declare`), with a complete-sentence message that names the resource,
the problem and the fix, and an explicit enforcement level: mandatory where a mistake wastes TPU
hours or leaks data, advisory where the pack can only warn (estimates, hardening). Any level can
be changed per stack through the standard pack config (`{"<policy>": {"enforcementLevel":
"advisory"}}`). Values not known yet (during preview) never produce a violation: see
`policies.rules.common`.
"""

from pulumi_policy import Policy

from policies.rules import cluster, networks, ray_head, raycluster, raycluster_pools, rayjob, stack, storage, tpu_pools

# Each module's rules as it declares them (`RULES`, policies/rules/declare.py), in this order.
ALL: list[Policy] = [
    *networks.RULES.policies,
    *tpu_pools.RULES.policies,
    *cluster.RULES.policies,
    *storage.RULES.policies,
    *raycluster.RULES.policies,
    *ray_head.RULES.policies,
    *raycluster_pools.RULES.policies,
    *rayjob.RULES.policies,
    *stack.RULES.policies,
]


def markdown_table(policies: list[Policy] = ALL) -> str:
    """docs/policies.md's list of the rules (`scripts/sync-settings` writes it)."""
    lines = ["| rule | level | what it requires |", "| --- | --- | --- |"]
    for policy in policies:
        level = policy.enforcement_level.value if policy.enforcement_level else "advisory"
        lines.append(f"| `{policy.name}` | {level} | {policy.description} |")
    return "\n".join(lines) + "\n"
