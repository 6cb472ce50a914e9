"""Runtime: a program as MindSpore primitives and the Cell that calls them.

Owns a program family in the bridge library (family.py), the forward and backward primitives
(primitive.py), the PYNATIVE fast path (fast_path.py), and the Cell that matches a call to the
capture and nests its outputs (cell.py).
"""
