"""Custom Numba kernels, one module per family.

Each family exposes one public function that dispatches on its input: a NumPy array runs the
``numba.njit`` CPU twin; a device array (CuPy, or anything with ``__cuda_array_interface__``,
or a Numba device array) launches the ``numba.cuda`` kernel on the current device and stream.
Kernels compile once per process (Numba caches the compiled kernel per signature), never per
chunk. Only pipelines call them.
"""

from daskgpu.kernels import compat

compat.restore_row_stack()  # before any kernel compiles: numba-cuda needs it under numpy 2.5
