"""Recipes on this machine (RFC section 8): ``discovery`` (the search path, trust, parsing, shadowing,
resolving a RECIPE argument), ``trust`` (trusted directories and their checks), ``watch`` (re-scanning the
search path while ``serve`` runs). Imports no other runtime sub-room."""
