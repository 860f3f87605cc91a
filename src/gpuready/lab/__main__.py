"""`python -m gpuready.lab ...` is `gpuready lab ...`."""

import sys

from gpuready.lab.cli import main

sys.exit(main())
