"""`python -m cli` runs the `groupshift` command (for environments without the console script)."""

from cli.main import main

main()
