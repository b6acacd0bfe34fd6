"""daskgpu's built-in pipelines: importing a pipeline's module registers it.

The registry imports only the module of the pipeline asked for (all of them to list them): a
run of one pipeline does not load the others' kernels, nor does a worker that unpickles one of
its task functions.
"""

BUILTIN = {
    "histogram-pipeline": "pipelines.histogram_pipeline",
    "join-pipeline": "pipelines.join_pipeline",
    "mean-pipeline": "pipelines.mean_pipeline",
    "stencil-pipeline": "pipelines.stencil_pipeline",
    "trips-pipeline": "pipelines.trips_pipeline",
}
