"""daskgpu's built-in pipelines; importing this package registers them."""

from pipelines import (
    histogram_pipeline,
    join_pipeline,
    mean_pipeline,
    stencil_pipeline,
    trips_pipeline,
)

__all__ = [
    "histogram_pipeline",
    "join_pipeline",
    "mean_pipeline",
    "stencil_pipeline",
    "trips_pipeline",
]
