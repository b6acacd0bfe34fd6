"""matmul-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare and registration.
- ``layout.py``: the blocks of C, sized for the device.
- ``peak.py``: the device's measured peak, for the share of it reported.
- ``tasks.py``: what runs on the workers: the operands, the block products' summaries.
- ``shared.py``: what the run and its check both use: seeds, check vectors, sampled cells.
- ``check.py``: the verification (Freivalds' check, sampled cells) and its mutations.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Matrix product C = A B of two large matrices with the backend's BLAS per block, "
           "verified by Freivalds' check")
