"""The native layer: what ms_aten compiled, and the plain conversions around it.

library (libms_aten.so: loading, version check, entry points), dtypes (the one dtype table),
threads, convert (tensors between torch and MindSpore), build (users' own kernels), pyboost
(the compiled PYNATIVE module: loading; pyboost_build compiles it). It imports nothing from the
layers above (ms_aten.ops, ms_aten.programs).
"""
