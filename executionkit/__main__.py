"""``python -m executionkit``: the command line."""

from __future__ import annotations

import sys

from executionkit._cli import main

sys.exit(main())
