"""Model shapes (as data) and the kernels one step of a model issues."""
