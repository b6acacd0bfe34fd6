"""matmul-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare and registration.
- ``layout.py``: the blocks of C, sized for the device.
- ``peak.py``: the device's measured peak, for the share of it reported.
- ``tasks.py``: what runs on the workers: the operands, the block products' summaries.
- ``shared.py``: what the run and its check both use: seeds, probes, sampled cells, the check's
  context.
- ``check.py``: the check's declaration and the steps of both depths (Freivalds' check, sums,
  squares, sampled cells); ``check_full.py``: every block of C multiplied again;
  ``check_replay.py``: the recomputations on the workers; ``check_mutations.py``: the wrong
  results the check must catch.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Matrix product C = A B of two large matrices with the backend's BLAS per block, "
           "verified by Freivalds' check")
