"""Inputs and synthetic data.

Array inputs (``.npy`` files, Zarr arrays) and table inputs (Parquet, CSV), checked up front and
read block by block on the workers; random arrays and tables drawn on the workers from a seed.
"""
