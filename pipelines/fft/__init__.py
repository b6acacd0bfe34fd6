"""fft-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare and registration.
- ``layout.py``: the slabs: row slabs for the row transforms, column slabs for the column
  transforms.
- ``stages.py``: the graph stage by stage, and the staged run that times each stage.
- ``tasks.py``: what runs on the workers: the input drawn or read, the transforms, the transpose's
  pieces.
- ``shared.py``: what the run and its check both use: the check's context, the input's scheme,
  the sampled cells, the certified projection.
- ``check.py``: the check, declared (Parseval, the certificates, DFT sums, planted peaks);
  ``check_mutations.py`` the wrong results it must catch; ``check_replay.py`` its own
  recomputation of the input's rows and of DFT sums.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("2-D FFT of an n x n array in blocks (row transforms, an all-to-all transpose, column"
           " transforms), verified by Parseval, DFT sums and planted peaks")
