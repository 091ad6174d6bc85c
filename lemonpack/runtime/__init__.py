"""The runtime: discover recipes, build launch plans, launch, probe and supervise engines.

Seven sub-rooms, one job each (docs/architecture.md, "The runtime's sub-rooms"), from the top:
``serving`` (the serving policy of ``lemonpack serve``), ``lifecycle`` (one engine's life),
``models`` (the user's models), ``recipes`` (recipes on this machine), ``selection`` (the
backend selector), ``engines`` (engines as processes and containers), ``launch`` (launch plans).
"""
