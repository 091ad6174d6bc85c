"""The catalogue (issue 10): sources, verified index, search, static site."""
