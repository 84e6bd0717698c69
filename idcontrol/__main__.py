"""``python -m idcontrol``: the command line."""

import sys

from idcontrol.cli import main

sys.exit(main())
