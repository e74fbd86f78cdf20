"""Run the taskhub command line: ``python -m taskhub``."""

from taskhub._cli import main

main()
