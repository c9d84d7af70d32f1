"""`python -m harness.report`: see harness/report/build.py."""

import sys

from harness.report.build import main

sys.exit(main())
