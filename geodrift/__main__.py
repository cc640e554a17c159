"""``python -m geodrift`` runs the command line."""

from geodrift.cli.entry import main

main()
