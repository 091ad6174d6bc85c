"""The runtime: discover recipes, build launch plans, launch, probe and supervise engines."""
