"""What-if studies: many scenario points from one spec, run on Dask."""
