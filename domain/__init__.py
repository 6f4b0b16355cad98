"""Pure domain logic shared by infra, workloads, policies and the trainer: no Pulumi imports.

In layers, each package or top-level module importing only those below it (pyproject.toml's
[tool.importlinter], tests/test_domain_layers.py), low to high: `tpu/` (the TPU catalog, how
capacity is obtained), `paths.py` (where the checkout is), `setting.py` (how a setting is
declared, what its checks read), `problems.py`, `stack_identity.py` and `compile_cache.py`; `ray/`
(Ray's version, the head's size, the compiler flags, queueing, the preemption timings); `gcp/`
(Google Cloud's names, GKE's versions, DCN address plans, images); `training/` (a job, its
presets, MaxText's configuration, the job's log); `stack_settings.py` and `workload_settings.py`
(the stacks' settings records); `resources/` (what the infra stack creates, built from its record:
the Google Cloud resources' arguments, the worker image's build, the RayCluster and its pods'
shutdown grace); `perf/` (memory, FLOPs, cost, MaxText's config check and the speed model);
`config/` (reading the stacks' raw config, their checks of several settings, and outputs).
"""
