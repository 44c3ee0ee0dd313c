"""The `groupshift` command line: thin click commands over the packages."""
