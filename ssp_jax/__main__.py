import sys

from ssp_jax.cli import main

sys.exit(main())
