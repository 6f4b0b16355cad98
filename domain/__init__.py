"""Pure domain logic shared by infra, workloads, policies and the trainer: no Pulumi imports.

In layers, each package importing only those below it (pyproject.toml's [tool.importlinter],
tests/test_domain_layers.py), low to high: `tpu/` (the TPU catalog, how capacity is obtained),
`paths.py` (where the checkout is), `setting.py` (how a setting is declared and read),
`problems.py` and `stack_identity.py`; `ray/` (the Ray cluster); `gcp/` (Google Cloud and GKE
resources and names); `training/` (a job, its presets, MaxText's configuration, the job's log);
`perf/` (memory, FLOPs, cost, MaxText's config check and the speed model); `config/` (the stacks'
settings and outputs). A builder below `config/` takes the settings as a Protocol of what it reads.
"""
