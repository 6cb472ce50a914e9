"""The op route: one dispatcher op as one MindSpore primitive.

Bottom to top: constants, schema, binding, pattern (the spec grammar and how a call fills an
op's tensor slots); infer, fake_infer (shapes and dtypes); primitive (the ops.Custom base);
grad (backward kernels of any order); value_dependent, fast_path (PYNATIVE); bounded (GRAPH
mode's padded value-dependent calls); op (ms_aten.op). It imports the native layer only.
"""
