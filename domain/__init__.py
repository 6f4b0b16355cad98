"""Pure domain logic shared by infra, workloads, policies and the trainer: no Pulumi imports."""
