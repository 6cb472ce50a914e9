"""`linear_kernel="onednn"` of ms_aten.causal_lm: a decoding program's large float32 linears on
oneDNN's inner product (the dispatcher op mkldnn::_linear_pointwise) instead of ATen's linear.

ATen's float32 linear calls MKL's GEMM, which on the AMD CPU measured runs a one-row product
(a decode step at batch 1) on one thread, reading the weight at 11-19 GB/s where a two-thread
sum reads 23-32; oneDNN's inner product splits it over the OpenMP team, and is faster at 4 and
16 rows as well (benchmarks/decode_batch/linear_kernels.py, docs/performance.md). Its sums run
in another order, so logits differ from ATen's by rounding (about 1e-6 relative), and a greedy
token can differ from `model.generate`'s where two logits tie that closely: hence a choice,
not the default.

Only where the forward is never differentiated (torch registers no autograd kernel for the op,
so a backward through it is refused: csrc/op/grad.h), so only CausalLM, which refuses
gradients.
"""
from __future__ import annotations

import torch

KERNELS = ("aten", "onednn")
# Below about a million weights oneDNN's fixed cost per call (about 35 us) outweighs what it
# saves at one row (benchmarks/results/decode_batch/linear_kernels.md: 256 x 1,024, ATen 0.088
# ms against 0.116; 1,024 x 1,024, 0.373 against 0.244).
MIN_WEIGHTS = 1 << 20


def available() -> bool:
    return torch.backends.mkldnn.is_available()


def rewrite(graph_module: torch.fx.GraphModule) -> int:
    """Each aten.linear of a float32 CPU input and a weight of at least MIN_WEIGHTS elements
    made mkldnn._linear_pointwise (no fused activation), in place; the number rewritten."""
    count = 0
    for node in graph_module.graph.find_nodes(op="call_function",
                                              target=torch.ops.aten.linear.default):
        x, weight, *rest = node.args
        bias = rest[0] if rest else node.kwargs.get("bias")
        value, held = x.meta.get("val"), weight.meta.get("val")
        if not (isinstance(value, torch.Tensor) and isinstance(held, torch.Tensor)
                and value.dtype == held.dtype == torch.float32
                and value.device.type == held.device.type == "cpu"
                and held.numel() >= MIN_WEIGHTS):
            continue
        node.target = torch.ops.mkldnn._linear_pointwise.default
        node.args, node.kwargs = (x, weight, bias, "none", [], ""), {}
        count += 1
    if count:
        graph_module.recompile()
    return count
