"""Profiler traces: capture a short window, turn it into per-step facts. Design notes: docs/trace.md."""
