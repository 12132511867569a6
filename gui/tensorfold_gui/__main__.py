"""`python -m tensorfold_gui`: the same as `tensorfold-tray`."""

import sys

from .app import main

sys.exit(main())
