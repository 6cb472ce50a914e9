"""The program route: a whole torch graph as one MindSpore primitive.

capture (torch.export), program (the exported graph as a program of the op route's OpCalls,
registered in the library), function (ms_aten.function: the forward and backward primitives),
module (ms_aten.module: a torch module as a Cell), causal_lm (a language model over a static
KV cache as a Cell) and generate (ms_aten.generate: the decoding loop over it). It imports the
op route and the native layer.
"""
