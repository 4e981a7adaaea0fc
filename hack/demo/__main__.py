"""``python -m demo`` (with ``PYTHONPATH=hack``): see :mod:`demo.run`."""

import sys

from demo.run import main

sys.exit(main())
