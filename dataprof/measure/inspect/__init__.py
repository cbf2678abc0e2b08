"""``dataprof inspect``'s measurement: one dataset's samples, transform stages and batches, in this process."""
