"""dataprof: a throughput profiler for PyTorch data pipelines.

Importing this package is cheap: torch, psutil and pynvml are imported only by
the modules that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
