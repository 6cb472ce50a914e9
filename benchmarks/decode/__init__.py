"""Decoding benchmark: GPT-2 with a static KV cache, ms_aten.causal_lm and ms_aten.generate against
torch eager."""
