"""The installed dataprof's version (written into every result document)."""

__version__ = "0.1.0"
