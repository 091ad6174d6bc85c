"""One engine's life: ``supervisor`` (the pure per-model state machine), ``runner`` (runs it over engine
handles), ``foreground`` (``lemonpack run``'s loop), ``stop_signals`` (SIGINT/SIGTERM as a stop request).
Imports the sub-rooms below it."""
