"""What pipelines build on.

The registry and ``@pipeline``, typed parameters, backends, chunking, reductions, data-parallel
steps, atomic outputs, timing and the numeric helpers pipelines and their checks share.
Pipelines import only this, :mod:`daskgpu.data`, :mod:`daskgpu.kernels`, errors and config.
"""
