"""The policy pack, offline: for pull requests that have no cloud credentials.

    python -m policies.check --stack dev [--project infra|workloads] [--set KEY=VALUE ...]
                             [--policy-config FILE]

Runs the project's program under Pulumi's mocks with that stack's config (a workloads stack's
StackReference is answered with the referenced infra stack's outputs, computed the same way),
hands every registered resource to the pack as the engine would, prints each violation with
its enforcement level, and exits 1 when any is mandatory (2 when the program itself fails).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from domain.paths import INFRA_PROJECT, WORKLOADS_DIR, WORKLOADS_PROJECT
from policies.evaluate import evaluate
from policies.mock_engine import PROJECT_ROOT, ProgramRun, RecordingMonitor, run_program, stack_config

PROJECTS = {
    "infra": (INFRA_PROJECT, PROJECT_ROOT),
    "workloads": (WORKLOADS_PROJECT, WORKLOADS_DIR),
}


def _infra_program() -> Callable[[], dict[str, Any]]:
    from infra.config import read_settings
    from infra.program import build

    return lambda: build(read_settings())


def _workloads_program() -> Callable[[], Awaitable[dict[str, Any]]]:
    from workloads.config import read_settings
    from workloads.program import build

    return lambda: build(read_settings())


def _parse_sets(pairs: Sequence[str], project: str) -> dict[str, Any]:
    """`--set key=value` edits a stack's config (`key` or `namespace:key`; JSON values allowed)."""
    updates: dict[str, Any] = {}
    for pair in pairs:
        key, separator, raw = pair.partition("=")
        if not separator or not key:
            raise SystemExit(f"--set {pair!r}: use KEY=VALUE, for example --set production=true")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        updates[key if ":" in key else f"{project}:{key}"] = value
    return updates


def run_stack(project: str, stack: str, overrides: dict[str, Any] | None = None) -> ProgramRun:
    """The stack's program under mocks; a workloads stack's infra reference is run first."""
    name, directory = PROJECTS[project]
    config = {**stack_config(stack, directory), **(overrides or {})}
    if project == "infra":
        return run_program(_infra_program(), config, project=name, stack=stack)
    referenced = config.get(f"{name}:infraStack")
    stack_outputs = {}
    if referenced:
        infra_stack = str(referenced).rsplit("/", 1)[-1]
        stack_outputs[referenced] = run_stack("infra", infra_stack).outputs
    monitor = RecordingMonitor(stack_outputs=stack_outputs)
    return run_program(_workloads_program(), config, project=name, stack=stack, monitor=monitor)


def resources_of(run: ProgramRun) -> list[dict[str, Any]]:
    """Registrations as the pack sees them (components included: policies skip what they do not
    know). Dependencies tell a firewall's network apart where mocks give ids no name."""
    return [
        {
            "type": r.type,
            "name": r.name,
            "urn": r.urn,
            "props": r.inputs,
            "parent": r.parent,
            "provider": r.provider,
            "dependencies": r.dependencies,
        }
        for r in run.registrations
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="stack name, e.g. dev (reads Pulumi.<stack>.yaml)")
    parser.add_argument("--project", choices=list(PROJECTS), default="infra")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a config value for this check only (repeatable)",
    )
    parser.add_argument("--policy-config", type=Path, help="a JSON file of policy config, as for --policy-pack-config")
    args = parser.parse_args(argv)
    name, directory = PROJECTS[args.project]
    if not (directory / f"Pulumi.{args.stack}.yaml").exists():
        parser.error(f"no stack file Pulumi.{args.stack}.yaml in {directory}")
    policy_config = json.loads(args.policy_config.read_text()) if args.policy_config else None
    try:
        run = run_stack(args.project, args.stack, _parse_sets(args.sets, name))
    except Exception as error:
        print(f"{name} stack {args.stack}: the program failed before the policies ran:\n{error}", file=sys.stderr)
        return 2
    violations = evaluate(resources_of(run), policy_config)
    for violation in violations:
        # A stack policy's violation is about the whole stack, not one resource.
        where = violation.urn or f"the stack {args.stack} as a whole"
        print(f"[{violation.enforcement_level}] {violation.policy_name}: {violation.message}\n    {where}")
    mandatory = [v for v in violations if v.enforcement_level == "mandatory"]
    print(
        f"{name} stack {args.stack}: {len(run.registrations)} resources checked, "
        f"{len(mandatory)} mandatory and {len(violations) - len(mandatory)} other violations"
    )
    return 1 if mandatory else 0


if __name__ == "__main__":
    sys.exit(main())
