"""The documents dataprof writes and reads, as data only: settings, a sweep's trials and report, a watched run,
an inspection, the machine they were measured on, and their JSON form.

The bottom layer: standard library only, importing nothing else of dataprof but ``errors`` and ``version``.
"""
