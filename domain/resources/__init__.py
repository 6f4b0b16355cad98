"""What the infra stack creates, built from its settings record (domain/stack_settings.py): the Google Cloud resources' arguments, the worker image's build and the RayCluster manifest."""
