"""Pure domain logic shared by infra, workloads, policies and the trainer: no Pulumi imports.

In layers, each package importing only those below it (pyproject.toml's [tool.importlinter],
tests/test_domain_layers.py), low to high: `tpu/` (the TPU catalog, how capacity is obtained),
`paths.py` (where the checkout is), `setting.py` (how a setting is declared and read),
`problems.py` and `stack_identity.py`; `ray/`'s and `gcp/`'s rules and names (Ray's version, the
head's size; Google Cloud's names, GKE's versions); `training/` (a job, its presets, MaxText's
configuration, the job's log); `stack_settings.py` and `workload_settings.py` (the stacks'
settings records); `ray/preemption.py` (the preemption timings, some derived from the infra
stack's record); `resources/`, the builders that take the infra stack's record (the Google Cloud
resources' arguments, the worker image's build, the RayCluster); `perf/` (memory, FLOPs, cost,
MaxText's config check and the speed model); `config/` (reading the stacks' settings, their checks
of several settings, and outputs).
"""
