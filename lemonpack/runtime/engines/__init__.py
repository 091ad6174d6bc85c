"""Engines as processes and containers: ``handles`` (spawn, probe, stop, clean up), ``proctable`` (the
process table of engines lemonpack started), ``ports`` (free ports), ``containers`` (container CLIs and their
stores), ``sentinel`` (orphan cleanup), ``probes`` (health probes), ``logs`` (engine output). Imports
``runtime.launch``."""
