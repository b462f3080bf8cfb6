"""`python -m kiln.cli ...`: the same as the `kiln` console script."""
import sys

from .main import main

sys.exit(main())
