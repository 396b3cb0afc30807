"""``python -m pyacc``: the command line (``info``, ``run``); see ``pyacc._cli``."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
