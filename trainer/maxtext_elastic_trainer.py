"""Elastic MaxText training for Spot slices: runs on any whole number of slices between the
job's minimum and maximum, and after a failure resumes from MaxText's latest checkpoint.

    python -m trainer.maxtext_elastic_trainer --job '<resolved job JSON>'
"""

import sys

from trainer.maxtext_trainer import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], elastic=True))
