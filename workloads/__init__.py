"""The workloads side: submitting MaxText jobs to a Ray cluster, locally or on GKE."""
