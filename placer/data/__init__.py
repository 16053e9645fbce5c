"""Real sparse ids: readers of the data formats (placer/data/readers.py, criteo.py), exact per-table access
counts and the measured access model (counting.py), and the samples a run trains on (samples.py)."""
