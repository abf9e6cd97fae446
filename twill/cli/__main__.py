"""``python -m twill.cli ARGS``: the ``twill`` command line."""

import sys

from twill.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
