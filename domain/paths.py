"""Where the checkout is: the root every project, venv and cache path is relative to."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# The trainer environment's lock (MaxText, JAX, libtpu): results computed in that environment
# are cached under it.
TRAINER_LOCK = PROJECT_ROOT / "requirements-trainer.txt"
TRAINER_PYTHON = PROJECT_ROOT / ".venv-trainer" / "bin" / "python"
FIT_CHECK_CACHE = PROJECT_ROOT / ".cache" / "fit-check"
MAXTEXT_CONFIG_CACHE = PROJECT_ROOT / ".cache" / "maxtext-config"

# The two Pulumi projects: their names (Pulumi.yaml's `name:`, which scripts/sync-settings writes
# from these) and where their project files are.
INFRA_PROJECT = "maxtext-tpu-infra"
WORKLOADS_PROJECT = "maxtext-tpu-workloads"
WORKLOADS_DIR = PROJECT_ROOT / "workloads"

# Where local runs keep their checkpoints (the workloads setting checkpointRoot's default,
# relative to the project root), and where the pages of runs whose checkpoints are elsewhere (a
# GKE job's bucket) are written on the machine that ran `pulumi up`.
LOCAL_RUNS = ".runs"
RUN_PAGES = PROJECT_ROOT / LOCAL_RUNS / "pages"
