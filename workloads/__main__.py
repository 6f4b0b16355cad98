"""Workloads stack entry point: read config once, build, export."""

import pulumi

from workloads.config import read_settings, secret_settings
from workloads.program import build

for output_name, value in build(read_settings(), secret_settings()).items():
    pulumi.export(output_name, value)
