"""The cluster a run computes on.

Its plan (devices from NVML, backend, options), the workers' start (forked CPU workers,
dask-cuda's GPU workers, an existing scheduler), security, the dashboard, and its close.
"""
