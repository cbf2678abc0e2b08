"""Framework backends: build a loader from a LoaderConfig and check a dataset."""
