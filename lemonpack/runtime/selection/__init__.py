"""The backend selector (seed 001): ``selector`` (the pure decision over recipes, a model and host
facts), ``presence`` (the I/O that gathers whether each candidate's binary or image is here). Imports
``runtime.engines`` (container CLIs, for presence only)."""
