"""``sluice`` as a Python file for spark-submit:
``spark-submit [options] "$(sluice spark-entry)" bootstrap run ...``."""

from __future__ import annotations

import sys

from sluice.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
