"""``python -m leveret`` is the ``leveret`` command."""

from __future__ import annotations

import sys

from leveret.cli.main import main

sys.exit(main())
