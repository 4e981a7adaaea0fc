"""``python -m demo``: see :mod:`demo.run`."""

import sys

from demo.run import main

sys.exit(main())
