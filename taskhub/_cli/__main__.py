"""Run the taskhub command line: ``python -m taskhub._cli``."""

from taskhub._cli import main

main()
