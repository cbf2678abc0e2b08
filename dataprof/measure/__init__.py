"""Measurement: the trial runner (parent), the trial (child), sampling, probes."""
