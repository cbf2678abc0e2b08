"""Decisions: pure functions of the documents in ``dataprof.results``.

The search, the recommendation, the diagnosis, ``dataprof run``'s verdict, ``dataprof inspect``'s checks, the
CI gates and the comparison of two documents. Nothing here measures or renders, so every decision runs again on
saved data (``dataprof diagnose``).
"""
