"""compile=True (ms_aten/programs/compile/): whole models run as code AOTInductor compiled,
against torch eager and autograd in both modes: the forward, every gradient and 10 Adam steps of
GPT-2, BERT and a CNN with BatchNorm (its running statistics too); the on-disk cache; a changed
input signature; dynamic shapes; buffers the compiled code writes in place (a KV cache: greedy
decoding against transformers' model.generate); the fallback to the interpreter; errors.

Compiling costs 5-30 s per library on 2 cores: every test shares one cache directory, so each
model compiles once for the session (both modes run the same libraries)."""
from __future__ import annotations

import copy
import json
import os
import platform
import subprocess
import warnings

import mindspore as ms
import models
import numpy as np
import pytest
import torch
from loss_cell import LossCell
from test_generate import CACHE, _gpt2, _llama, _prompt, _torch_greedy
from test_optim import assert_follows_torch
from training import train_ms, train_torch

import ms_aten
from ms_aten.programs.compile import cache as compile_cache
from ms_aten.programs.compile import compiled

from common import run_fresh, set_mode, to_ms

pytestmark = pytest.mark.slow

CASES = {
    "gpt2": lambda: models.gpt2(layers=1, dropout=0.0),
    "bert": lambda: models.bert(layers=1, dropout=0.0),
    "cnn": lambda: models.cnn(train=True),
}
# A training compile builds two libraries (about 40 s of CPU): GPT-2's holds everything BERT's
# would (the same layers' backwards; BERT's forward compiles above), the CNN's its BatchNorm
# statistics written by the compiled forward.
TRAINING_CASES = ("gpt2", "cnn")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("compiled"))


class SumOf(ms.nn.Cell):
    """sum(net(*inputs)): a scalar to differentiate, in either mode."""

    def __init__(self, net) -> None:
        super().__init__()
        self.net = net

    def construct(self, *inputs):
        return self.net(*inputs).sum()


def make_case(name: str, train: bool) -> models.Case:
    torch.manual_seed(0)
    case = CASES[name]()
    case.module.train(train)
    return case


def compiled_cell(case: models.Case, cache_dir: str, dynamic_shapes=None,
                  **options) -> ms_aten.TorchModule:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ms_aten.CompileWarning)  # a fallback here is a failure
        cell = ms_aten.module(copy.deepcopy(case.module), case.inputs,
                              dynamic_shapes=dynamic_shapes,
                              compile={"cache_dir": cache_dir, **options})
    assert cell.program.compiled is not None and cell.program.n_nodes == 1
    return cell


@pytest.mark.parametrize("name", list(CASES))
def test_forward_matches_torch(name, mode, cache_dir):
    case = make_case(name, train=False)
    set_mode(mode)
    cell = compiled_cell(case, cache_dir)
    assert not cell.program.compiled.training  # eval mode: the inference library alone
    want = models.logits(case.module(*case.inputs)).detach().numpy()
    got = models.logits(cell(*to_ms(case.inputs))).asnumpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", TRAINING_CASES)
def test_every_gradient_matches_torch(name, mode, cache_dir):
    """Train mode: the loss's gradient for every weight (and the CNN's image) against torch
    autograd, and BatchNorm's running statistics after the step against torch's."""
    case = make_case(name, train=True)
    reference = copy.deepcopy(case.module)
    inputs = [t.clone().requires_grad_(t.is_floating_point()) for t in case.inputs]
    loss = models.torch_loss(case.loss, models.logits(reference(*inputs)), case.target)
    loss.backward()

    set_mode(mode)
    cell = compiled_cell(case, cache_dir)
    assert cell.program.compiled.training
    params = cell.trainable_params()
    floating = case.inputs[0].is_floating_point()
    grad_fn = ms.value_and_grad(LossCell(cell, case.loss), 0 if floating else None, params)
    got_loss, grads = grad_fn(*to_ms((*case.inputs, case.target)))
    np.testing.assert_allclose(float(got_loss), loss.item(), rtol=1e-5)
    if floating:
        input_grad, grads = grads
        np.testing.assert_allclose(input_grad.asnumpy(), inputs[0].grad.numpy(), rtol=1e-4,
                                   atol=1e-6)
    want = dict(reference.named_parameters())
    assert len(grads) == len(want)
    # Gradients that are zero in exact arithmetic (attention's key bias) are rounding noise on
    # both sides: absolute error is measured against the largest gradient.
    scale = max(p.grad.abs().max().item() for p in want.values())
    for p, g in zip(params, grads, strict=True):
        expected = want[p.name.removeprefix("net.")].grad.numpy()
        np.testing.assert_allclose(g.asnumpy(), expected, rtol=1e-4, atol=1e-6 * scale,
                                   err_msg=p.name)
    for name_, buffer in reference.named_buffers():
        weight = dict(zip(cell._weight_names, cell.weights, strict=True))[name_]
        np.testing.assert_allclose(weight.asnumpy(), buffer.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name_)


@pytest.mark.parametrize("name", TRAINING_CASES)
def test_ten_adam_steps_follow_torch(name, mode, cache_dir):
    case = make_case(name, train=True)
    steps = 10
    ms_losses, cell, _ = train_ms(case, mode, lambda p: ms_aten.optim.Adam(p, lr=1e-2), steps,
                                  compile={"cache_dir": cache_dir})
    assert cell.program.compiled is not None
    torch_losses, module, _ = train_torch(case, lambda p: torch.optim.Adam(p, lr=1e-2), steps)
    assert_follows_torch(case, ms_losses, cell, torch_losses, module, rtol=2e-4)


def test_the_cache_serves_a_second_cell_and_a_new_signature_compiles(cache_dir, monkeypatch):
    # Each Cell captures (the capture cache, which would hand the second the first's key, off).
    monkeypatch.setenv("MS_ATEN_PROGRAM_CACHE", "off")
    set_mode("pynative")
    case = make_case("gpt2", train=False)
    first = compiled_cell(case, cache_dir)
    second = compiled_cell(case, cache_dir)
    assert second.program.compiled.cached and second.program.compiled.seconds < 1.0
    assert second.program.compiled.key == first.program.compiled.key
    # Another batch size: a capture of its own, compiled under its own key, as correct.
    tokens = torch.randint(0, 100, (3, 8))
    out = first(to_ms(tokens))["logits"].asnumpy()
    np.testing.assert_allclose(out, case.module(tokens).logits.detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    keys = {p.compiled.key for p in first._function.programs.values()}
    assert len(keys) == 2
    # A changed model (one more layer) is another key, never the cached library.
    torch.manual_seed(0)
    other = models.gpt2(layers=2, dropout=0.0)
    assert compiled_cell(other, cache_dir).program.compiled.key not in keys


def _two_graphs() -> dict[str, tuple[torch.fx.GraphModule, list[torch.Tensor]]]:
    """Two small graphs to build, as a training compile has its forward and backward."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x, w = torch.randn(4, 6), torch.randn(6, 3)
    return {"forward": (make_fx(lambda a, b: (torch.tanh(a @ b),), tracing_mode="fake")(x, w),
                        [x, w]),
            "backward": (make_fx(lambda a: (torch.nn.functional.gelu(a) * 2,),
                                 tracing_mode="fake")(x), [x])}


def _run_library(path, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return torch._C._aoti.AOTIModelContainerRunnerCpu(str(path), 1).run(inputs)


@pytest.mark.parametrize("interpreter, fallback", [
    (None, None), ("/bin/false", "second process failed"),
    ("/nonexistent/python", "is built after the others")], ids=["works", "fails", "no-start"])
def test_two_libraries_build_at_once_and_a_failed_second_process_builds_here(
        interpreter, fallback, tmp_path, monkeypatch, caplog):
    """aot_build.aot_compile_all: the forward in a second process while this one builds the
    backward; if that process fails (its interpreter exits 1 at once) or does not start, the
    forward is built here after the backward, as right. Nothing but the two libraries' folders
    is left."""
    from ms_aten.programs.compile import aot_build

    if interpreter is not None:
        monkeypatch.setattr(aot_build.sys, "executable", interpreter)
    graphs = _two_graphs()
    with caplog.at_level("INFO", logger="ms_aten"):
        built = aot_build.aot_compile_all(graphs, tmp_path)
    logged = [m for m in (r.getMessage() for r in caplog.records if r.name == "ms_aten")
              if "built here" in m or "built after" in m]
    assert len(logged) == (fallback is not None)
    assert fallback is None or fallback in logged[0]
    assert built == {"forward": "forward/forward.so", "backward": "backward/backward.so"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backward", "forward"]
    for name, (gm, inputs) in graphs.items():
        got = _run_library(tmp_path / built[name], inputs)
        torch.testing.assert_close(got[0], gm(*inputs)[0], rtol=1e-5, atol=1e-6)


ISA_PROBE = """
import json, sys, threading
from torch._inductor import cpu_vec_isa
from ms_aten.programs.compile import compiled
options = compiled.CompileOptions(cache_dir=sys.argv[1])  # nothing remembered there
compiled.start_vector_isa_probe(options)
alive = [t.name for t in threading.enumerate() if t.name.startswith("ms_aten ISA probe")]
picked = compiled._vector_isa(options.directory())
left = [t.name for t in threading.enumerate() if t.name.startswith("ms_aten ISA probe")]
flags = cpu_vec_isa.x86_isa_checker()
candidates = [str(isa) for isa in cpu_vec_isa.supported_vec_isa_list
              if all(flag in flags for flag in str(isa).split())]
print(json.dumps({"alive": alive, "picked": picked, "left": left, "candidates": candidates,
                  "valid": [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]}))
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="Inductor's x86 ISA candidates")
def test_the_vector_isa_probe_checks_every_candidate_at_once(tmp_path):
    """A compile's first question, the CPU's vector ISA, is probed in threads started when
    compile= is given, one per candidate, all at once (Inductor checks them one by one, a g++
    build each: a cold cache here, so each probe builds); the answer is Inductor's own."""
    out = run_fresh(["-c", ISA_PROBE, str(tmp_path / "ms_aten")],
                    env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}, timeout=300)
    probe = json.loads(out.splitlines()[-1])
    assert probe["candidates"], probe
    assert sorted(probe["alive"]) == sorted(f"ms_aten ISA probe {c}" for c in probe["candidates"])
    assert probe["left"] == [], probe
    assert probe["picked"] == probe["valid"][0], probe


def test_dynamic_shapes_compile_for_inference(mode, cache_dir):
    """One inference library for every batch size the Dim allows; the range is still checked
    before anything runs."""
    case = make_case("cnn", train=False)
    set_mode(mode)
    batch = torch.export.Dim("batch", min=1, max=16)
    cell = compiled_cell(case, cache_dir, dynamic_shapes=({0: batch},))
    assert cell.program.dynamic
    for n in (1, 6, 16):
        x = torch.randn(n, 3, 8, 8)
        np.testing.assert_allclose(cell(to_ms(x)).asnumpy(), case.module(x).detach().numpy(),
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises((ValueError, RuntimeError), match="outside its range"):
        cell(to_ms(torch.randn(17, 3, 8, 8)))


def test_what_cannot_compile_runs_interpreted_with_a_warning(mode, cache_dir):
    """Dynamic shapes in train mode: no compiled backward takes symbolic sizes yet."""
    case = make_case("cnn", train=True)
    set_mode(mode)
    batch = torch.export.Dim("batch", min=2, max=16)
    with pytest.warns(ms_aten.CompileWarning,
                      match="dynamic shapes are compiled for inference only"):
        cell = ms_aten.module(copy.deepcopy(case.module), case.inputs,
                              dynamic_shapes=({0: batch},), compile={"cache_dir": cache_dir})
    assert cell.program.compiled is None and cell.program.n_nodes > 1
    x = torch.randn(6, 3, 8, 8)
    reference = copy.deepcopy(case.module)
    np.testing.assert_allclose(cell(to_ms(x)).asnumpy(), reference(x).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def test_an_inference_compile_refuses_a_gradient_by_name_and_goes_on(mode, cache_dir):
    case = make_case("cnn", train=False)
    set_mode(mode)
    cell = compiled_cell(case, cache_dir)
    x = to_ms(case.inputs[0])
    with pytest.raises(RuntimeError, match="compiled for inference only"):
        ms.grad(SumOf(cell))(x)
    want = case.module(case.inputs[0]).detach().numpy()
    np.testing.assert_allclose(cell(x).asnumpy(), want, rtol=1e-4, atol=1e-5)


def test_a_function_compiles_with_its_backward(mode, cache_dir):
    def gelu_mix(x, y):
        return torch.nn.functional.gelu(x) * torch.tanh(y) + x.sum(-1, keepdim=True)

    x, y = torch.randn(4, 6), torch.randn(4, 6)
    set_mode(mode)
    fn = ms_aten.function(gelu_mix, (x, y), compile={"cache_dir": cache_dir})
    assert fn.program.compiled is not None and fn.program.compiled.training
    np.testing.assert_allclose(fn(*to_ms((x, y))).asnumpy(), gelu_mix(x, y).numpy(), rtol=1e-5,
                               atol=1e-6)
    grads = ms.grad(SumOf(fn), grad_position=(0, 1))(*to_ms((x, y)))
    xs = [x.clone().requires_grad_(), y.clone().requires_grad_()]
    gelu_mix(*xs).sum().backward()
    for got, want in zip(grads, xs, strict=True):
        np.testing.assert_allclose(got.asnumpy(), want.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_second_order_gradient_is_refused_by_name(cache_dir):
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    set_mode("pynative")
    fn = ms_aten.function(lambda a, b: torch.tanh(a) * b, (x, y),
                          compile={"cache_dir": cache_dir})
    first = ms.grad(SumOf(fn), grad_position=0)
    with pytest.raises(RuntimeError, match="second-order gradient through a compiled program"):
        ms.grad(lambda a, b: first(a, b).sum(), grad_position=0)(*to_ms((x, y)))
    assert ms.grad(SumOf(fn), grad_position=0)(*to_ms((x, y))).shape == (4, 6)


class Counter(torch.nn.Module):
    """An eval-mode module that updates its buffers at every call: a row written at a position
    (a cache's write) and a count added to."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("rows", torch.zeros(6, 4))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        self.rows.index_copy_(0, position, y)
        self.calls.add_(1)
        return self.rows.sum(0) * self.calls


def test_buffers_an_inference_compile_updates_are_written_in_place(mode, cache_dir):
    """The compiled code writes them (ms_aten.compiled.writes): nothing copied after the call,
    the Parameters hold torch's values, a gradient is refused by name and the next call works."""
    torch.manual_seed(0)
    module = Counter().eval()
    reference = copy.deepcopy(module)
    set_mode(mode)
    x, position = torch.randn(1, 4), torch.tensor([2])
    cell = compiled_cell(models.Case(module, (x, position), torch.zeros(4), "mse"), cache_dir)
    program = cell.program
    assert set(program.reinplaced) == set(program.mutations) == {"rows", "calls"}
    assert "\nc " not in program.spec  # no copy into a buffer after the call
    weights = dict(zip(cell._weight_names, cell.weights, strict=True))
    for step, (row, at) in enumerate([(x, 2), (torch.randn(1, 4), 5), (torch.randn(1, 4), 2)]):
        with torch.no_grad():
            want = reference(row, torch.tensor([at])).numpy()
        got = cell(*to_ms((row, torch.tensor([at])))).asnumpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"call {step}")
        np.testing.assert_allclose(weights["rows"].asnumpy(), reference.rows.numpy(), rtol=1e-5,
                                   atol=1e-6)
        assert float(weights["calls"].asnumpy()) == reference.calls.item() == step + 1
    # Refused in the forward in PYNATIVE mode; in GRAPH mode the forward has run (and written)
    # when its backward is refused.
    with pytest.raises(RuntimeError, match="compiled for inference, writing its buffers in "
                                           "place"):
        ms.grad(SumOf(cell), grad_position=None, weights=cell.trainable_params())(
            *to_ms((x, position)))
    got = cell(*to_ms((x, position))).asnumpy()
    with torch.no_grad():
        reference(x, position)
    calls = float(weights["calls"].asnumpy())
    assert calls == reference.calls.item() + (mode == "graph")
    np.testing.assert_allclose(weights["rows"].asnumpy(), reference.rows.numpy(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(got, reference.rows.sum(0).numpy() * calls, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_a_compiled_causal_lm_decodes_as_transformers_generate(make, mode, cache_dir,
                                                               monkeypatch):
    """One library for the prompt and every token (the sequence dim dynamic), the KV cache
    written in place by the compiled code; back-to-back generations need no reset."""
    torch.manual_seed(0)
    model = make().eval()
    set_mode(mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ms_aten.CompileWarning)
        lm = ms_aten.causal_lm(model, max_cache_len=CACHE, compile={"cache_dir": cache_dir})
    program = lm.program
    assert program.compiled is not None and program.n_nodes == 1 and program.dynamic
    assert program.mutations and set(program.reinplaced) == set(program.mutations)
    assert "\nc " not in program.spec
    long, short = _prompt(9, seed=2), _prompt(3, seed=3)
    expected = _torch_greedy(model, long, 12)
    assert len(set(expected[0, 9:].tolist())) > 3  # the test can tell a wrong cache
    np.testing.assert_array_equal(
        ms_aten.generate(lm, long.numpy(), max_new_tokens=12).asnumpy(), expected)
    np.testing.assert_array_equal(
        ms_aten.generate(lm, short.numpy(), max_new_tokens=CACHE - 3 + 1).asnumpy(),
        _torch_greedy(model, short, CACHE - 3 + 1))  # to the cache's end
    with pytest.raises(ValueError, match=rf"cache_position {CACHE} is outside the cache"):
        lm(ms_aten.to_ms(long[:, :1]), ms_aten.to_ms(torch.tensor([CACHE])))
    np.testing.assert_array_equal(
        ms_aten.generate(lm, long.numpy(), max_new_tokens=12).asnumpy(), expected)
    # Another capture of the model finds the library: the key holds no trace-made names (the
    # capture cache off: it would hand the new Cell the first capture's key).
    monkeypatch.setenv("MS_ATEN_PROGRAM_CACHE", "off")
    again = ms_aten.causal_lm(model, max_cache_len=CACHE, compile={"cache_dir": cache_dir})
    assert again.program.compiled.cached and again.program.compiled.key == program.compiled.key


@pytest.mark.parametrize("value, message", [
    ("yes", "compile= takes True, False or a dict"),
    ({"trainig": True}, r"unknown options \['trainig'\]"),
    ({"training": "no"}, "takes a bool"),
])
def test_bad_options_are_errors_naming_them(value, message):
    case = make_case("cnn", train=False)
    with pytest.raises(TypeError, match=message):
        ms_aten.module(case.module, case.inputs, compile=value)


def test_a_damaged_cache_entry_is_found_before_it_is_loaded(tmp_path):
    """An entry lists its files' sizes and digests, and model.txt's own: a library a partial
    copy truncated (which dlopen met with SIGBUS), a library changed inside (SIGSEGV), a
    garbled or missing model.txt are each Damaged, naming what is wrong."""
    entry = tmp_path / "entry"
    (entry / "inference").mkdir(parents=True)
    library = entry / "inference" / "inference.so"
    library.write_bytes(bytes(range(256)) * 64)
    compile_cache.seal(entry, ["name tiny", "inference inference/inference.so"])
    assert compile_cache.read(entry) == "name tiny\ninference inference/inference.so"
    whole, spec = library.read_bytes(), (entry / "model.txt").read_text()
    for damage, reason in [
            (lambda: library.write_bytes(whole[:len(whole) // 8]),
             "inference/inference.so has 2048 bytes, where 16384 were written"),
            (lambda: library.write_bytes(whole[:100] + bytes(1000) + whole[1100:]),
             "inference/inference.so does not match its checksum"),
            (lambda: (entry / "model.txt").write_text(spec.replace("tiny", "tinY")),
             "model.txt does not match its checksum"),
            (lambda: (entry / "model.txt").unlink(), "model.txt is missing")]:
        damage()
        with pytest.raises(compile_cache.Damaged, match=reason):
            compile_cache.read(entry)
        library.write_bytes(whole)
        (entry / "model.txt").write_text(spec)


def test_staging_folders_of_processes_gone_are_cleaned(tmp_path):
    dead = subprocess.Popen(["true"])  # a process that is gone by the time the cache is cleaned
    dead.wait()
    key = "0123456789abcdef" * 2
    names = [f"{key}.{dead.pid}.tmp", f"{key}.{dead.pid}.damaged", f"{key}.{os.getpid()}.tmp",
             key]
    for name in names:
        (tmp_path / name).mkdir()
    compile_cache.clean(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])


def test_an_interrupted_compile_leaves_nothing_in_the_cache(tmp_path, monkeypatch):
    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(compiled, "_compile_inference", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ms_aten.function(torch.tanh, (torch.randn(2, 3),),
                         compile={"cache_dir": str(tmp_path), "training": False})
    assert not list(tmp_path.glob("*.tmp")), list(tmp_path.iterdir())


CACHED_AND_DAMAGED = """
import json, sys, warnings
import numpy as np, torch, mindspore as ms
import ms_aten
ms.set_device("CPU")
x = torch.randn(4, 6)

def triple_tanh(a):
    return torch.tanh(a) * 3

def make():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = ms_aten.function(triple_tanh, (x,),
                              compile={"cache_dir": sys.argv[1], "training": False})
    np.testing.assert_allclose(fn(ms.Tensor(x.numpy())).asnumpy(), triple_tanh(x).numpy(),
                               rtol=1e-6, atol=1e-6)
    warned = [str(w.message) for w in caught
              if issubclass(w.category, (ms_aten.CompileWarning, ms_aten.CompileCacheWarning))]
    return fn.program.compiled, warned

loaded, loaded_warned = make()  # CXX names no compiler: the cached entry only
library = next(loaded.path.rglob("*.so"))
whole = library.read_bytes()
partial = library.with_name("partial")
partial.write_bytes(whole[:len(whole) // 8])
partial.replace(library)  # a partial copy (this process keeps the library it loaded)
torch._inductor.config.cpp.cxx = (None, "g++")
rebuilt, rebuilt_warned = make()
again, again_warned = make()
print(json.dumps({"loaded": [loaded.cached, loaded_warned], "entry": str(loaded.path),
                  "rebuilt": [rebuilt.cached, rebuilt_warned, rebuilt.key == loaded.key],
                  "again": [again.cached, again_warned],
                  "size": [library.stat().st_size, len(whole)]}))
"""


def test_a_cached_entry_loads_without_a_compiler_and_a_damaged_one_is_compiled_again(tmp_path):
    x = torch.randn(4, 6)
    fn = ms_aten.function(lambda a: torch.tanh(a) * 3, (x,),
                          compile={"cache_dir": str(tmp_path), "training": False})
    assert fn.program.compiled is not None and not fn.program.compiled.cached
    out = run_fresh(["-c", CACHED_AND_DAMAGED, str(tmp_path)], timeout=300,
                    env={"CXX": "/nonexistent/g++"})
    found = json.loads(out.strip().splitlines()[-1])
    assert found["loaded"] == [True, []], found
    cached, warned, same_key = found["rebuilt"]
    assert not cached and same_key and len(warned) == 1, found
    assert f"the compile cache's entry {found['entry']} is damaged (inference/inference.so " \
           f"has" in warned[0], warned
    assert found["again"] == [True, []], found
    assert found["size"][0] > found["size"][1] // 8, found
