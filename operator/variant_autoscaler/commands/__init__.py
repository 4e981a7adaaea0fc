"""Sub-commands of the ``variant-autoscaler`` CLI (one module each, see :mod:`variant_autoscaler.cli`)."""
