"""Lowering: an exported graph as one program spec for the bridge (csrc/program/program.h).

Owns the spec, a node per dispatcher call (program.py), the buffers a program writes in place
(inplace.py), and the sizes it computes from its inputs' at launch (symbolic.py).
"""
