"""Capture: a torch module or function as torch.export's graph, with torch's meaning kept.

Owns torch.export's call (export.py), the user's subgraph replacements (rewrite.py), autograd
constructs and custom Functions kept or refused by name (autograd_constructs.py,
autograd_functions.py), what torch.export refuses run as opaque torch calls (partition.py finds
the parts, opaque.py runs them; nodes.py holds the Python both kinds of node run), and the
structure of a call's inputs and outputs (structure.py).
"""
