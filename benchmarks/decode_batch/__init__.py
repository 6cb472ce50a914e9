"""Batched decoding benchmark: left-padded batches, ms_aten.generate against model.generate and
torch's static-cache loop, the decode step beside the memory bound."""
