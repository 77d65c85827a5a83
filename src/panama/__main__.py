"""``python -m panama`` runs the ``panama`` command."""

from panama.cli import main

main()
