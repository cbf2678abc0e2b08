"""``python -m dataprof``."""

from __future__ import annotations

from dataprof.cli import main

if __name__ == "__main__":
    main()
