"""Where a job keeps XLA's compiled programs between runs: JAX's persistent compilation cache,
set through MaxText's own `jax_cache_dir` (MaxText sets JAX's cache directory itself, so JAX's
`JAX_COMPILATION_CACHE_DIR` variable does nothing under it).

One prefix, declared here, that the job's cache directory, the bucket's lifecycle rule and the
policy pack's rules on who may write it all use. On GKE the cache is the checkpoint bucket's
prefix, read and written by JAX over `gs://` (not through the FUSE mount: docs/training.md says
why); on a local stack it is a folder beside the runs, shared by every run of the stack.
"""

COMPILE_CACHE_PREFIX = "jax-cache"
# Set on the Ray cluster's pods by the infra stack (the checkpoint bucket's prefix as a `gs://`
# URL), read by the trainer on each worker: where the cache is belongs to the cluster, not to the
# job, so it never changes a job's command (and so its submission id). Where it is unset (a local
# Ray cluster), the cache is beside the runs, under the job's checkpoint root.
COMPILE_CACHE_ENV = "MAXTEXT_TPU_COMPILE_CACHE"
# JAX's own variable: MaxText sets JAX's cache directory from its jax_cache_dir, after JAX has
# read this, so it does nothing in a MaxText job.
JAX_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"


def compile_cache_dir(root: str) -> str:
    """The cache under `root`: the checkpoint bucket's `gs://` URL on GKE, a local stack's
    checkpoint root."""
    return f"{root.rstrip('/')}/{COMPILE_CACHE_PREFIX}"
