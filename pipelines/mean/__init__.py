"""mean-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare and registration.
- ``tasks.py``: what runs on the workers: block sums of random or input data, the mean.
- ``shared.py``: what the run and its check both use: the result type, the block grid.
- ``check.py``: the verification (block sums, redrawn blocks, the sampling bound) and its mutations.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = "Mean of a large n x n random array (or of a .npy/Zarr input), verified"
