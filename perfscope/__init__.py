"""perfscope: measure which fixes make your PyTorch training faster, on your own hardware, ranked.

    perfscope analyze examples/tiny_transformer.py      # a workload file -> results.json + report.html

A workload file defines ``workload() -> perfscope.Workload`` (see perfscope.workload).
"""

from perfscope._version import __version__
from perfscope.hooks import (
    Profiler,  # light: heavy imports happen only when a Profiler is enabled
)
from perfscope.workload import Workload

__all__ = ["Profiler", "Workload", "__version__"]
