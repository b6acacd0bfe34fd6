"""kmeans-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare, the reported value and registration.
- ``init.py``: the initialisation: random rows or k-means||.
- ``inputs.py``: points read from a .npy or Zarr input.
- ``labels.py``: ``--labels``: the pass writing every point's nearest final centroid.
- ``baseline.py``: the one-process peer of the loop.
- ``tasks.py``: what runs on the workers: the shards, the fused kernel pass, Lloyd's loop.
- ``shared.py``: what the run and its check both use: the data's scheme and constants.
- ``check.py``: the verification of every iteration, and its mutations.
- ``check_init.py``: the check of the initialisation and the blobs' true centres.
- ``check_outputs.py``: the check of the cluster sizes, ``--output`` and ``--labels``.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Lloyd's k-means data-parallel: a fused kernel pass per shard (nearest centroid, "
           "sums, counts), tree-reduced")
