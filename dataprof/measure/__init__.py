"""Measurement: what each command measures (``sweep/``, ``inspect/``, ``watch/``) and what they share: the
machine's facts, the probes and the sampler that read a process tree from outside, the batch timings, and the
messages between processes."""
