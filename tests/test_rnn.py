"""aten::lstm.input and aten::gru.input against torch's nn.LSTM / nn.GRU, in both modes,
forward and gradients: ops with two tensor lists (lstm: hx and params), whose lengths the op
spec names explicitly (csrc/op/spec.h, T[i,j,..])."""
from __future__ import annotations

import pytest
import torch
from test_grad import ms_grads

import ms_aten

from common import assert_same, cotangents, run, to_ms, to_torch, torch_grads

torch.manual_seed(5)

CONFIGS = [  # (num_layers, bidirectional, batch_first)
    (1, False, False),
    (2, True, False),
    (2, False, True),
]
IDS = [f"layers{n}-{'bi' if b else 'uni'}{'-batch_first' if f else ''}" for n, b, f in CONFIGS]


def rnn_case(kind: str, num_layers: int, bidirectional: bool, batch_first: bool):
    """(ms_aten op, inputs as the op takes them, torch reference over the same inputs)."""
    module_type = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    module = module_type(4, 3, num_layers=num_layers, bidirectional=bidirectional,
                         batch_first=batch_first)
    params = tuple(p.detach().clone() for p in module._flat_weights)
    x = torch.randn((2, 5, 4) if batch_first else (5, 2, 4))
    state_shape = (num_layers * (2 if bidirectional else 1), 2, 3)
    constants = {"has_biases": True, "num_layers": num_layers, "dropout": 0.0, "train": False,
                 "bidirectional": bidirectional, "batch_first": batch_first}
    op = ms_aten.op(f"{kind}.input", **constants)
    if kind == "lstm":
        hx = (torch.randn(state_shape), torch.randn(state_shape))
        inputs = (x, hx, params)

        def reference(x_, hx_, params_):
            return tuple(torch.ops.aten.lstm.input(x_, hx_, params_, **constants))
    else:
        inputs = (x, torch.randn(state_shape), params)

        def reference(x_, h_, params_):
            return tuple(torch.ops.aten.gru.input(x_, h_, params_, **constants))
    return op, inputs, reference, module


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_rnn_forward_matches_torch(mode, kind, config):
    op, inputs, reference, module = rnn_case(kind, *config)
    expected = reference(*inputs)
    # The aten op is what nn.LSTM / nn.GRU run.
    torch.testing.assert_close(expected[0], module(inputs[0], inputs[1])[0])
    assert_same(run(op, to_ms(inputs), mode), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_rnn_gradients_match_torch_autograd(mode, kind, config):
    op, inputs, reference, _ = rnn_case(kind, *config)
    weights = cotangents(reference(*inputs))
    expected = torch_grads(reference, inputs, weights)
    got = ms_grads(op, inputs, weights, mode)
    assert len(got) == len(expected)
    for actual, want in zip(got, expected, strict=True):
        torch.testing.assert_close(to_torch(actual), want, rtol=1e-4, atol=1e-5)


def test_list_lengths_are_fixed_by_the_first_graph_call():
    op, inputs, _, _ = rnn_case("lstm", 1, False, False)
    run(op, to_ms(inputs), "graph")
    _, longer, _, _ = rnn_case("lstm", 2, False, False)
    with pytest.raises(TypeError, match=r"'aten::lstm\.input': this op object was first called "
                                        r"with \(tensor, list of 2, list of 4\) and now with "
                                        r"\(tensor, list of 2, list of 8\)"):
        run(op, to_ms(longer), "graph")


def test_meshgrid_a_list_in_and_a_list_out(mode):
    a, b = torch.arange(3.0), torch.arange(4.0)
    op = ms_aten.op("meshgrid.indexing", indexing="ij")
    assert_same(run(op, to_ms(((a, b),)), mode), tuple(torch.meshgrid(a, b, indexing="ij")))
