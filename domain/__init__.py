"""Pure domain logic shared by infra, workloads, policies and the trainer: no Pulumi imports.

By concern: `tpu/` (the TPU catalog, how capacity is obtained), `gcp/` (Google Cloud and GKE
resources and names), `ray/` (the Ray cluster), `training/` (a job, its presets, MaxText's
configuration, the job's log), `config/` (the stacks' settings and outputs), `perf/` (memory,
FLOPs, cost and the speed model); `paths.py` says where the checkout is.
"""
