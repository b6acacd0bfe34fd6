"""daskgpu against its peers, measured side by side: ``python -m benchmarks.NAME``."""
