"""A sweep's measurement: the trial runner (parent), the host that forks every trial, the trial itself."""
