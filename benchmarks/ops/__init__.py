"""Op benchmark: one ATen op through ms_aten against MindSpore native, pyfunc and AOT routes."""
