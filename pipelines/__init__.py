"""daskgpu's built-in pipelines; importing this package registers them."""

from pipelines import mean_pipeline

__all__ = ["mean_pipeline"]
