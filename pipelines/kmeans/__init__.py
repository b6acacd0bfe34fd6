"""kmeans-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare, the reported value and registration.
- ``init.py``: the initialisation: random rows or k-means||.
- ``inputs.py``: points read from a .npy or Zarr input.
- ``labels.py``: ``--labels``: the pass writing every point's nearest final centroid.
- ``baseline.py``: the one-process peer of the loop.
- ``tasks.py``: what runs on the workers: the shards, the fused kernel pass, Lloyd's loop.
- ``shared.py``: what the run and its check both use: the data's scheme, the check's context.
- ``check.py``: the verification (``CHECK``), declared on :mod:`daskgpu.verification`.
- ``check_fast.py``, ``check_replay.py``, ``check_mutations.py``: its fast-only step, its
  recomputations on the workers, and the wrong results it must reject.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Lloyd's k-means data-parallel: a fused kernel pass per shard (nearest centroid, "
           "sums, counts), tree-reduced")
