"""``python -m geodrift`` runs the command line."""

from geodrift.cli.main import main

main()
