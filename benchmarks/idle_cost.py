"""What the default stack's TPUs cost per training hour and per idle day, before and after scale
to zero, and under each capacity choice: the README's table, from the product's own cost model.

    .venv/bin/python -m benchmarks.idle_cost            # the dev stack (Pulumi.dev.yaml)
    .venv/bin/python -m benchmarks.idle_cost --stack prod

Each row is the stack file's config plus a few settings, validated by the infra program's own
parse_settings and priced by domain.config.settings.settings_cost, the function behind the stack's
trainingDollarsPerHour, idleDollarsPerHour and idleDollarsPerDay outputs. TPU chips only: the
Ray head's CPU node, disks and network are not counted. Prices are list prices from
domain/tpu/tpu_catalog.py (their source and date are printed below the table); a row whose
capacity has no catalog price shows no figure, as the stack's outputs do.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from domain.config import cli_config
from domain.config.settings import parse_settings, settings_cost
from domain.paths import PROJECT_ROOT
from domain.stack_settings import StackSettings
from domain.tpu.capacity_choices import CAPACITY_CHOICES, RESERVATION
from policies.mock_engine import INFRA_PROJECT, stack_config

_PREFIX = f"{INFRA_PROJECT}:"
# A reservation choice needs one named; any valid name prices the same.
_RESERVATION = {"reservation": "my-reservation"}


@dataclass(frozen=True)
class Row:
    label: str
    settings: dict[str, Any]


def rows(slices: int) -> list[Row]:
    """Before issue 20 every slice stayed up from `pulumi up` to `pulumi destroy`; now the default
    keeps none up while idle. Then each capacity choice at that default."""
    found = [
        Row(f"before: every slice always up (minSlices {slices})", {"minSlices": slices}),
        Row("after: the default, scale to zero (minSlices 0)", {}),
    ]
    for choice in CAPACITY_CHOICES:
        extra = _RESERVATION if choice == RESERVATION else {}
        found.append(Row(f"capacity {choice}, scale to zero", {"capacity": [choice], **extra}))
    found.append(Row("capacity spot, one slice kept up (minSlices 1)", {"capacity": ["spot"], "minSlices": 1}))
    return found


def stack_settings(stack: str, settings: dict[str, Any]) -> StackSettings:
    """The stack file's config with `settings` on top, validated as the infra program does it
    under the CLI (domain/config/cli_config.py: the project's defaults merged, values as text)."""
    config = {**stack_config(stack, PROJECT_ROOT), **{_PREFIX + key: value for key, value in settings.items()}}
    raw = cli_config.settings_raw(PROJECT_ROOT, stack, config, StackSettings)
    return parse_settings(raw, stack=stack, project_name=INFRA_PROJECT)


def _money(amount: float | None) -> str:
    return "no figure (set pricePerChipHour)" if amount is None else f"${amount:,.2f}"


def table(stack: str) -> str:
    """The markdown table, then how each row was priced."""
    base = stack_settings(stack, {})
    lines = [
        "| Stack | Training, $/hour | Idle, $/hour | Idle, $/day |",
        "| --- | ---: | ---: | ---: |",
    ]
    bases: dict[str, None] = {}
    for row in rows(base.slices):
        cost = settings_cost(stack_settings(stack, row.settings))
        lines.append(
            f"| {row.label} | {_money(cost.training_dollars_per_hour)} | {_money(cost.idle_dollars_per_hour)} "
            f"| {_money(cost.idle_dollars_per_day)} |"
        )
        bases[f"- {cost.capacity}: {cost.basis}"] = None
    notes = [
        f"TPU chips only: {base.total_chips} chips, {base.slices} slices of {base.accelerator.slice_type(base.topology)}"
        f", in {base.region}. Priced at:",
        *bases,
    ]
    return "\n".join([*lines, "", *notes])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev", help="the stack file to start from (Pulumi.<stack>.yaml)")
    print(table(parser.parse_args().stack))


if __name__ == "__main__":
    main()
