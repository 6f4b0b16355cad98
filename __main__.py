"""Infra stack entry point: read config once, build, export."""

import pulumi

from infra.config import read_settings
from infra.program import build

for output_name, value in build(read_settings()).items():
    pulumi.export(output_name, value)
