"""Multislice MaxText training: a fixed number of workers, one per TPU VM of every slice.

python -m trainer.maxtext_multi_slice_trainer --job '<resolved job JSON>'
"""

import sys

from trainer.maxtext_trainer import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], elastic=False))
