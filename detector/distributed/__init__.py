"""Processes and devices: multi-host start-up and agreement (`multihost`),
the data-parallel mesh (`sharding`), determinism flags and seeds, and
SIGTERM/SIGINT handling (`preemption`)."""
