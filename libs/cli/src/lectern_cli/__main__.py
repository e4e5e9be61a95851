"""``python -m lectern_cli`` is the ``lectern`` command."""

import sys

from lectern_cli.main import main

sys.exit(main())
