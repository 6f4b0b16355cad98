"""The workloads stack's resource types, as the engine names a dynamic provider's resources:
`pulumi-python:dynamic/<module>:<name>`, from the module and name a `pulumi.dynamic.Resource`
subclass declares (workloads/ray_job.py declares them with these; the policies and tests find the
resources by the types)."""

MODULE = "ray"
RAY_JOB_NAME = "RayJob"
RAY_JOB_GUARD_NAME = "RayJobGuard"


def dynamic_type(module: str, name: str) -> str:
    return f"pulumi-python:dynamic/{module}:{name}"


RAY_JOB = dynamic_type(MODULE, RAY_JOB_NAME)
RAY_JOB_GUARD = dynamic_type(MODULE, RAY_JOB_GUARD_NAME)
