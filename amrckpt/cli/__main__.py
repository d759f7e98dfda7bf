"""``python -m amrckpt.cli``: the ``amrckpt`` command."""

import sys

from . import main

sys.exit(main())
