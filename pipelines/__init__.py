"""daskgpu's built-in pipelines, a package each: importing a pipeline's module registers it.

The registry imports only the module of the pipeline asked for: a run of one pipeline does not
load the others' kernels, nor does a worker that unpickles one of its task functions. ``list``
reads each package's ``SUMMARY`` (its ``__init__``, which imports nothing) without importing
any pipeline module.
"""

BUILTIN = {
    "fft-pipeline": "pipelines.fft.pipeline",
    "histogram-pipeline": "pipelines.histogram.pipeline",
    "join-pipeline": "pipelines.join.pipeline",
    "kmeans-pipeline": "pipelines.kmeans.pipeline",
    "matmul-pipeline": "pipelines.matmul.pipeline",
    "mean-pipeline": "pipelines.mean.pipeline",
    "pca-pipeline": "pipelines.pca.pipeline",
    "stencil-pipeline": "pipelines.stencil.pipeline",
    "train-pipeline": "pipelines.train.pipeline",
    "trips-pipeline": "pipelines.trips.pipeline",
}
