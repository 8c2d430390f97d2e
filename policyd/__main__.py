"""`python -m policyd`: the same as the `policyd` command."""

import sys

from policyd.cli import main

sys.exit(main())
