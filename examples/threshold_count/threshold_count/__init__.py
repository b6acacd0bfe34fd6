"""A daskgpu plugin: threshold-count, written with ``daskgpu.array_pipeline``."""
