"""pca-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare, the reported value and registration.
- ``output.py``: the components written to a file.
- ``tasks.py``: what runs on the workers: the data, the blocks' QR or float64 Gram matrices (and
  cells' certificates) or sketches.
- ``shared.py``: what the run and its check both use: the known spectrum and basis, the cells
  and the probes.
- ``check.py``: the check, declared, and the steps both depths share; ``check_mutations.py``
  the wrong results it must catch; ``check_fast.py``: the cells' certificates and a sample of
  them (exact, covariance) or one thin pass (randomized); ``check_full.py``: the blockwise
  Gram matrix; ``check_replay.py``: the data drawn or read again, on the workers.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Principal components of a tall-and-skinny array: float64 Gram matrix (tall-skinny "
           "QR where it is not accurate enough, or a randomised SVD) of row blocks, verified "
           "against the blockwise Gram matrix")
