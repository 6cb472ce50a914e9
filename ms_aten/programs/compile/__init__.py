"""compile=True: a captured graph as AOTInductor's code, run as one op.

Owns the compile and its fallback (compiled.py), the builds in this process and a second one
(aot_build.py), the cache on disk (cache.py), and which inputs a compiled backward
differentiates (derivatives.py).
"""
