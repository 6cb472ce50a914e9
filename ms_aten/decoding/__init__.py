"""Decoding with a KV cache, on top of the program route: ms_aten.causal_lm and ms_aten.generate.

Owns the language model captured over transformers' static cache as one Cell (causal_lm.py,
static_cache.py; the models it serves: served.py) with decoding's graph passes
(grouped_attention.py, onednn_linear.py), and the decoding loop (generate.py) with its logits
processing (logits_process.py), beam search (beam_search.py) and host-side checks (checks.py).
"""
