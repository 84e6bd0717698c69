"""``python -m idcontrol``: the command line."""

import sys

from idcontrol.tools.cli import main

sys.exit(main())
