"""Workloads stack entry point: read config once (a bad stack file is refused here, before any
resource), then run the async program, which checks the job against the infra stack's outputs
before it registers the job; its outputs are the stack's."""

import pulumi

from workloads.config import read_settings
from workloads.program import build

settings = read_settings()
pulumi.run(lambda: build(settings))
