import sys

from variant_autoscaler.cli import main

sys.exit(main())
