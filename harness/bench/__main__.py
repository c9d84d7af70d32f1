"""`python -m harness.bench`: see harness/bench/cli.py."""

import sys

from harness.bench.cli import main

sys.exit(main())
