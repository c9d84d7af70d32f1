"""`python -m harness.view`: see harness/view/app.py."""

import sys

from harness.view.app import main

sys.exit(main())
