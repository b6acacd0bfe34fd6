"""pca-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare, the reported value and registration.
- ``output.py``: the components written to a file.
- ``tasks.py``: what runs on the workers: the data, the blocks' QR or float64 Gram matrices (and
  cells' certificates) or sketches.
- ``shared.py``: what the run and its check both use: the known spectrum and basis, the cells
  and the probes.
- ``check.py``: the verification against the blockwise Gram matrix, and its mutations.
- ``check_cells.py``: the fast depth of the exact method: the cells' certificates, a sample.
- ``check_pass.py``: the fast depth of the randomised method: one thin pass over the data.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Principal components of a tall-and-skinny array: float64 Gram matrix (tall-skinny "
           "QR where it is not accurate enough, or a randomised SVD) of row blocks, verified "
           "against the blockwise Gram matrix")
