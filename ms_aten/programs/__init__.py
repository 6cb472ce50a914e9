"""Whole torch graphs as MindSpore Cells: capture -> lower -> run, with compile beside lowering.

- `capture/`: torch.export of a module or function, and what the capture keeps or refuses.
- `lowering/`: the exported graph as one program spec of the op route's OpCalls.
- `compile/`: compile=True, the graph as AOTInductor's code, cached on disk.
- `runtime/`: the program as MindSpore primitives and the Cell that calls them.
- `stored/`: the capture cache on disk, so that a later process skips the capture.
- `module.py` (ms_aten.module) and `function.py` (ms_aten.function): the entry points.
- `base.py`: what every stage shares (CaptureError, Signature, the compiled handle).

It imports the op route (ms_aten.ops) and the native layer; ms_aten.decoding builds on it.
"""
