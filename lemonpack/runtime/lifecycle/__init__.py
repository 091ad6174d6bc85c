"""One engine's life: ``supervisor`` (the pure per-model state machine), ``runner`` (runs it over engine
handles), ``foreground`` (``lemonpack run``'s loop), ``stop_signals`` (SIGINT/SIGTERM as a stop request).
Imports ``runtime.models``, ``runtime.recipes``, ``runtime.engines``, ``runtime.launch``. Design notes:
``SUPERVISOR.md`` next to this file."""
