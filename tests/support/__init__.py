"""What the tests share that is not a fixture of pytest's: the repository's root (``repo``)."""
