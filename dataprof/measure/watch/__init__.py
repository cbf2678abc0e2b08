"""``dataprof run`` and ``dataprof.watch()``: a real training script's DataLoaders, timed, and its process tree,
sampled from outside."""
