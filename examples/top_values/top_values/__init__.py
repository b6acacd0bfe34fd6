"""A daskgpu plugin: top-values, written with ``daskgpu.table_pipeline``."""
