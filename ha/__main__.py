"""``python -m ha``: the ``ha`` command."""

from .cli import main

main()
