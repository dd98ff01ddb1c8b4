"""``python -m gpu_market.cli``: the ``gpum`` command."""

import sys

from . import main

sys.exit(main())
