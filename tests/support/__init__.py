"""Shared test support for the runtime tests: a fake engine, plan helpers, llama-server."""
