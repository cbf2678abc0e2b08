"""Cold data (``--cache``): which files a trial reads, the page cache, eviction, the dataset on storage."""
