"""`python -m harness.bench`: see harness/bench/measures.py."""

import sys

from harness.bench.measures import main

sys.exit(main())
