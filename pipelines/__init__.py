"""daskgpu's built-in pipelines: importing a pipeline's module registers it.

The registry imports only the module of the pipeline asked for: a run of one pipeline does not
load the others' kernels, nor does a worker that unpickles one of its task functions, and
``list`` reads the summaries below without importing any.
"""

BUILTIN = {
    "fft-pipeline": "pipelines.fft_pipeline",
    "histogram-pipeline": "pipelines.histogram_pipeline",
    "join-pipeline": "pipelines.join_pipeline",
    "kmeans-pipeline": "pipelines.kmeans_pipeline",
    "matmul-pipeline": "pipelines.matmul_pipeline",
    "mean-pipeline": "pipelines.mean_pipeline",
    "pca-pipeline": "pipelines.pca_pipeline",
    "stencil-pipeline": "pipelines.stencil_pipeline",
    "train-pipeline": "pipelines.train_pipeline",
    "trips-pipeline": "pipelines.trips_pipeline",
}

# Each the same text as its module's @pipeline summary (a test keeps them so).
SUMMARIES = {
    "fft-pipeline": "2-D FFT of an n x n array in blocks (row transforms, an all-to-all "
                    "transpose, column transforms), verified by Parseval, DFT sums and planted "
                    "peaks",
    "histogram-pipeline": "Histogram of a large array (numpy.histogram semantics) with a custom "
                          "kernel per chunk",
    "join-pipeline": "Inner join of two synthetic tables (like dask-cuda's merge benchmark; the "
                     "smaller broadcast where it fits, else hash-shuffled) and a group-by "
                     "aggregate",
    "matmul-pipeline": "Matrix product C = A B of two large matrices with the backend's BLAS "
                       "per block, verified by Freivalds' check",
    "kmeans-pipeline": "Lloyd's k-means data-parallel: a fused kernel pass per shard (nearest "
                       "centroid, sums, counts), tree-reduced",
    "mean-pipeline": "Mean of a large n x n random array (or of a .npy/Zarr input), verified",
    "pca-pipeline": "Principal components of a tall-and-skinny array: tall-skinny QR (or a "
                    "randomised SVD) of row blocks, verified against the blockwise Gram matrix",
    "stencil-pipeline": "2-D heat diffusion: explicit 5-point stencil kernel, halo exchange, "
                        "temporal blocking",
    "train-pipeline": "Softmax regression trained data-parallel: per-shard gradients, "
                      "tree-reduced, weights broadcast",
    "trips-pipeline": "Taxi-trip ETL: one fused kernel pass per partition (haversine "
                      "distance, filter, sums by hour and passengers) on cuDF or pandas "
                      "columns",
}
