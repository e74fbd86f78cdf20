"""Run the taskhub command line: ``python -m taskhub``."""

import os
import sys

# `python -m` puts the current directory first on sys.path: a taskset folder evaluated from
# inside could then shadow any module with one of its own files.
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]

from taskhub._cli import main  # noqa: E402

main()
