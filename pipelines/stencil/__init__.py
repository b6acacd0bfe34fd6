"""stencil-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare and registration.
- ``tasks.py``: what runs on the workers: the grid, the halo exchange, the kernel steps.
- ``shared.py``: what the run and its check both use: the exact solution, the probes, the bounds.
- ``check.py``: the verification (the exact solution at probes, energy decay) and its mutations.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = "2-D heat diffusion: explicit 5-point stencil kernel, halo exchange, temporal blocking"
