"""Parallel sweeps: lanes (a device and a disjoint set of cores each) run the sweep's pairs at the same time.

Design notes: docs/parallel.md."""
