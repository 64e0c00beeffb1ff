"""perfscope's own version, in a leaf module: modules inside perfscope record it without importing the package root
(which re-exports the Profiler façade, and with it hooks, measure and trace: a cycle for any of them)."""

__version__ = "0.1.0"
