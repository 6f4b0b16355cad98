"""Where a job keeps XLA's compiled programs between runs: JAX's persistent compilation cache,
set through MaxText's own `jax_cache_dir` (MaxText sets JAX's cache directory itself, so JAX's
`JAX_COMPILATION_CACHE_DIR` variable does nothing under it).

One prefix, declared here, that the job's cache directory, the bucket's lifecycle rule and the
policy pack's rules on who may write it all use. On GKE the cache is the checkpoint bucket's
prefix, read and written by JAX over `gs://` (not through the FUSE mount: docs/training.md says
why); on a local stack it is a folder beside the runs, shared by every run of the stack.
"""

COMPILE_CACHE_PREFIX = "jax-cache"


def bucket_cache_dir(bucket: str) -> str:
    """The cache of a job whose checkpoints are in Cloud Storage bucket `bucket`."""
    return f"gs://{bucket}/{COMPILE_CACHE_PREFIX}"


def local_cache_dir(checkpoint_root: str) -> str:
    """The cache of a local stack whose runs are under `checkpoint_root`."""
    return f"{checkpoint_root.rstrip('/')}/{COMPILE_CACHE_PREFIX}"
