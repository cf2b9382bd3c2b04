"""`python -m covey.cli`: the `covey` command."""

import sys

from covey.cli import main

sys.exit(main())
