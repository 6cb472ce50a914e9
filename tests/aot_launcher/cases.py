"""What the AOT launcher (launcher.cpp) runs: op calls with their inputs and torch references, a
whole program's files, the plan that hands them to the launcher, and the comparison of its
outputs with torch on the launcher's device.

Torch only (no MindSpore, no ms_aten, no numpy): scripts/gpu_check.sh runs this on a machine with
a CUDA torch and nothing else. The op specs and the program come from make_cases.py, which needs
ms_aten and runs where MindSpore does.
"""
from __future__ import annotations

import ctypes
import json
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

# MindSpore's dtype names (TypeIdToString), the strings the launcher hands to the kernel.
MS_DTYPES = {torch.bool: "bool", torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16",
             torch.int32: "int32", torch.int64: "int64", torch.float16: "float16",
             torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
             torch.complex64: "complex64", torch.complex128: "complex128"}
TORCH_DTYPES = {name: dtype for dtype, name in MS_DTYPES.items()}
SPECS = "specs.json"  # make_cases.py's op specs, by case name
PROGRAM = "gpt2"  # make_cases.py's folder for the whole program
PLAN = "plan.txt"


def _randn(seed: int, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The same tensor at every call: the MindSpore route gets the launcher's inputs."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _grad_of(forward: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The reference of a VJP case: torch autograd's gradient of forward at x for cotangent g."""
    def vjp(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_()
        return torch.autograd.grad(forward(x), x, g)[0]
    return vjp


@dataclass(frozen=True)
class OpCase:
    """One kernel: the op `ms_aten.op(op, **constants)` makes (its VJP's with vjp=True), or a
    literal spec, launched on `inputs()` (the kernel's buffers, a Tensor[] flattened) and compared
    with `reference` (torch on the same tensors, on the launcher's device)."""

    name: str
    op: str | None
    inputs: Callable[[], list[torch.Tensor]]
    reference: Callable[..., Any]
    constants: dict[str, Any] = field(default_factory=dict)
    vjp: bool = False
    # The call's arguments as MindSpore takes them (a Tensor[] as a tuple), from the buffers.
    group: Callable[[list[Any]], tuple] = tuple
    spec: str | None = None  # a literal spec instead of ms_aten.op's (None with op=None: none)
    error: str | None = None  # the launch must fail with this in its message
    cuda_only: bool = False
    host: tuple[int, ...] = ()  # inputs left in host memory on the CUDA kernel

    def outputs(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        result = self.reference(*inputs)
        return list(result) if isinstance(result, (tuple, list)) else [result]


def _leaky(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.leaky_relu(x, 0.2)


def _index_put(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.index_put(x, (i,), v, accumulate=True)


_ROWS = torch.tensor([0, 2, 2, 5, 0])  # repeated rows: accumulate sorts and sums them

OP_CASES = (
    OpCase("leaky_relu", "leaky_relu", lambda: [_randn(1, 4, 5)], _leaky, {"negative_slope": 0.2}),
    OpCase("leaky_relu_grad", "leaky_relu", lambda: [_randn(2, 4, 5), _randn(3, 4, 5) + 1],
           _grad_of(_leaky), {"negative_slope": 0.2}, vjp=True),
    OpCase("matmul", "matmul", lambda: [_randn(4, 2, 3, 4), _randn(5, 4, 5)], torch.matmul),
    OpCase("softmax", "softmax", lambda: [_randn(6, 3, 7)], lambda x: torch.softmax(x, -1),
           {"dim": -1}),
    OpCase("index_put", "index_put", lambda: [_randn(7, 6, 4), _ROWS, _randn(8, 5, 4)], _index_put,
           {"accumulate": True}, group=lambda b: (b[0], (b[1],), b[2])),
    OpCase("max_dim", "max.dim", lambda: [_randn(9, 3, 6)], lambda x: tuple(torch.max(x, 1)),
           {"dim": 1}),
    *(OpCase(f"cumsum_{name}", "cumsum", lambda dtype=dtype: [_randn(10, 3, 5).mul(4).to(dtype)],
             lambda x: torch.cumsum(x, 1), {"dim": 1})
      for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16),
                          ("float32", torch.float32), ("int64", torch.int64))),
    OpCase("leaky_relu_empty", "leaky_relu", lambda: [_randn(11, 0, 3)], _leaky,
           {"negative_slope": 0.2}),
    OpCase("mm_empty_inner", "mm", lambda: [_randn(12, 3, 0), _randn(13, 0, 2)], torch.mm),
    # Errors: a message and a non-zero status, and the next kernel runs.
    OpCase("bad_spec", None, lambda: [_randn(14, 3)], torch.abs, spec="call aten::not_an_op . 1 t0",
           error="operator aten::not_an_op is not registered in torch"),
    OpCase("no_spec", None, lambda: [_randn(15, 3)], torch.abs,
           error="the Custom op has no 'ms_aten_spec' attribute"),
    OpCase("wrong_dtype", "mm", lambda: [_randn(16, 2, 3), _randn(17, 3, 4, dtype=torch.float64)],
           lambda a, b: torch.mm(a, b.float()), error="same dtype"),
    OpCase("host_buffer", "leaky_relu", lambda: [_randn(18, 4, 5)], _leaky, {"negative_slope": 0.2},
           error="is not CUDA device memory", cuda_only=True, host=(0,)),
    OpCase("after_errors", "leaky_relu", lambda: [_randn(19, 4, 5)], _leaky,
           {"negative_slope": 0.2}),
)


@dataclass(frozen=True)
class Buffer:
    dtype: torch.dtype
    shape: tuple[int, ...]
    file: str

    def line(self, kind: str, host: bool = False) -> str:
        shape = ",".join(map(str, self.shape)) or "-"
        return f"{kind} {MS_DTYPES[self.dtype]} {shape} {self.file}{' host' if host else ''}"


def save(tensor: torch.Tensor, path: Path) -> None:
    """The tensor's bytes, row-major (no numpy: ctypes reads the CPU copy's memory)."""
    t = tensor.detach().cpu().contiguous()
    path.write_bytes(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel()
                     else b"")


def load(path: Path, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
    data = path.read_bytes()
    if not data:
        return torch.empty(tuple(shape), dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(tuple(shape))


@dataclass
class Planned:
    """A kernel in the plan: what it is checked against."""

    name: str
    outputs: list[Buffer]
    expected: list[torch.Tensor]  # on the launcher's device
    error: str | None = None
    tolerance: dict[str, float] = field(default_factory=dict)
    torch_waits: bool | None = None  # on CUDA: torch's own call waits for its stream (_waits)


def _kernel_lines(name: str, entry: str, spec_file: str | None, inputs: list[Buffer],
                  outputs: list[Buffer], host: Sequence[int] = ()) -> list[str]:
    lines = [f"kernel {name} {entry}"]
    if spec_file is not None:
        lines.append(f"attr str ms_aten_spec {spec_file}")
    lines += [b.line("in", i in host) for i, b in enumerate(inputs)]
    lines += [b.line("out") for b in outputs]
    # The first launch builds torch's state (CUDA context, cuBLAS, the caching allocator's
    # blocks); the second is the one checked, queued behind a gate on CUDA.
    return [*lines, "launch", "launch gated"]


def _op_kernel(case: OpCase, folder: Path, specs: dict[str, dict[str, str]],
               device: torch.device) -> tuple[list[str], Planned]:
    inputs = [t.to(device) for t in case.inputs()]
    expected = case.outputs(inputs)
    in_buffers = []
    for i, t in enumerate(inputs):
        in_buffers.append(Buffer(t.dtype, tuple(t.shape), f"{case.name}.in{i}.bin"))
        save(t, folder / in_buffers[-1].file)
    out_buffers = [Buffer(t.dtype, tuple(t.shape), f"{case.name}.out{k}.bin")
                   for k, t in enumerate(expected)]
    spec_file = None
    entry = "MsAtenCall"
    if case.spec is not None or case.op is not None:
        spec = case.spec if case.spec is not None else specs[case.name]["spec"]
        entry = specs[case.name]["entry"] if case.op is not None else entry
        spec_file = f"{case.name}.spec"
        (folder / spec_file).write_text(spec)
    lines = _kernel_lines(case.name, entry, spec_file, in_buffers, out_buffers, case.host)
    waits = _waits(case.reference, inputs) if device.type == "cuda" and not case.error else None
    return lines, Planned(case.name, out_buffers, expected, case.error, torch_waits=waits)


def _waits(reference: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> bool:
    """Whether torch's own call synchronizes: it is queued behind a long kernel on its stream
    (torch.cuda._sleep, about 0.25 s) and the stream is idle when it returns. Tells ATen's own
    waits (a value read back to the host) from ms_aten's."""
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        reference(*inputs)  # the caching allocator's blocks and the libraries' handles first
        torch.cuda._sleep(500_000_000)
        reference(*inputs)
        waited = stream.query()
    stream.synchronize()
    return waited


@dataclass(frozen=True)
class ProgramFiles:
    """make_cases.py's files for one captured program, under <cases>/<name>/ (manifest.json)."""

    folder: Path
    manifest: dict[str, Any]

    @classmethod
    def read(cls, folder: Path) -> ProgramFiles:
        return cls(folder, json.loads((folder / "manifest.json").read_text()))

    def buffers(self, key: str) -> list[Buffer]:
        return [Buffer(TORCH_DTYPES[d], tuple(s), f"{self.folder.name}/{f}")
                for d, s, f in self.manifest[key]]


def _program_kernels(files: ProgramFiles, device: torch.device) -> tuple[list[str], list[Planned]]:
    """The forward and the backward of a captured program, registered first as ms_aten's Python
    does (ms_aten_program_register), each kernel naming its family by its spec attribute."""
    name, m = files.folder.name, files.manifest
    inputs, outputs = files.buffers("inputs"), files.buffers("outputs")
    grads_in, grads = files.buffers("cotangents"), files.buffers("gradients")
    lines = [f"register {m['family']} {name}/key.txt {name}/call.spec {name}/vjp.spec"]
    lines += _kernel_lines(f"{name}_forward", "MsAtenCall", f"{name}/forward.attr", inputs,
                           outputs)
    # The backward takes the forward's states (after its graph's outputs) from its files.
    n_graph_outputs = len(m["reference_outputs"])
    lines += _kernel_lines(f"{name}_backward", "MsAtenCall", f"{name}/backward.attr",
                           [*inputs, *grads_in, *outputs[n_graph_outputs:]], grads)

    def expected(key: str) -> list[torch.Tensor]:
        return [load(files.folder.parent / b.file, b.dtype, b.shape).to(device)
                for b in files.buffers(key)]

    # torch's outputs were computed on the CPU: a device's kernels sum in other orders.
    tolerance = {"atol": 1e-5, "rtol": 1e-4} if device.type == "cpu" else {"atol": 1e-4,
                                                                           "rtol": 1e-3}
    # The states are the library's own (a generator state, a handle): not compared.
    return lines, [Planned(f"{name}_forward", outputs[:n_graph_outputs],
                           expected("reference_outputs"),
                           tolerance=tolerance),
                   Planned(f"{name}_backward", grads, expected("reference_gradients"),
                           tolerance=tolerance)]


def write_plan(folder: Path, device: torch.device) -> list[Planned]:
    """plan.txt in `folder` (which holds make_cases.py's files) for the launcher on `device`,
    with every op case's inputs; returns what each kernel is checked against."""
    specs = json.loads((folder / SPECS).read_text())
    lines: list[str] = []
    planned: list[Planned] = []
    for case in OP_CASES:
        if case.cuda_only and device.type != "cuda":
            continue
        case_lines, case_planned = _op_kernel(case, folder, specs, device)
        lines += case_lines
        planned.append(case_planned)
    program_lines, program_planned = _program_kernels(ProgramFiles.read(folder / PROGRAM), device)
    (folder / PLAN).write_text("\n".join([*lines, *program_lines, ""]))
    return [*planned, *program_planned]


_LAUNCH = re.compile(r"^launch (\S+) rc=(-?\d+) ms=([\d.]+)(?: queued=([01]))?(?: error=(.*))?$")
_REGISTER = re.compile(r"^register (\S+) rc=(-?\d+)(?: error=(.*))?$")


@dataclass
class Launch:
    rc: int
    ms: float
    queued: bool | None
    error: str


def parse(stdout: str) -> tuple[dict[str, list[Launch]], dict[str, str]]:
    """The launcher's lines: launches by kernel, in order; registrations' errors by family."""
    launches: dict[str, list[Launch]] = {}
    registered: dict[str, str] = {}
    for line in stdout.splitlines():
        if (m := _LAUNCH.match(line)) is not None:
            queued = None if m[4] is None else m[4] == "1"
            launches.setdefault(m[1], []).append(Launch(int(m[2]), float(m[3]), queued,
                                                        m[5] or ""))
        elif (m := _REGISTER.match(line)) is not None:
            registered[m[1]] = m[3] or ""
    return launches, registered


@dataclass
class Outcome:
    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.detail}"


def _compare(planned: Planned, folder: Path, device: torch.device) -> str:
    """How the kernel's outputs compare with torch's: "matches ..." or why they differ."""
    worst = 0.0
    for k, (buffer, want) in enumerate(zip(planned.outputs, planned.expected, strict=True)):
        got = load(folder / buffer.file, buffer.dtype, buffer.shape).to(device)
        try:
            torch.testing.assert_close(got, want, **planned.tolerance)
        except AssertionError as error:
            return f"output {k}: {str(error).splitlines()[0]} ({' '.join(str(error).split())})"
        if got.numel():
            worst = max(worst, (got.double() - want.double()).abs().max().item())
    return f"matches torch (max abs diff {worst:.3g})" if worst else "matches torch exactly"


def judge(planned: Sequence[Planned], stdout: str, folder: Path,
          device: torch.device) -> list[Outcome]:
    """One outcome per kernel (its last launch), then the device checks over all of them."""
    launches, registered = parse(stdout)
    outcomes = [Outcome(f"register {f}", not e, e or "the library decoded both specs")
                for f, e in registered.items()]
    gated: list[str] = []  # kernels whose last launch was gated (CUDA)
    waited: list[str] = []  # those that waited where torch's own call does not
    for p in planned:
        runs = launches.get(p.name)
        if not runs:
            outcomes.append(Outcome(p.name, False, "no launch line (did the launcher die?)"))
            continue
        last = runs[-1]
        if p.error is not None:
            ok = all(r.rc != 0 and p.error in r.error for r in runs)
            outcomes.append(Outcome(p.name, ok, f"rc={last.rc}, {last.error[:160]!r}"))
            continue
        if any(r.rc != 0 for r in runs):
            bad = next(r for r in runs if r.rc != 0)
            outcomes.append(Outcome(p.name, False, f"rc={bad.rc}: {bad.error}"))
            continue
        why = _compare(p, folder, device)
        ok = why.startswith("matches")
        note = ""
        if last.queued is not None:
            note = ", queued behind the gate" if last.queued else ", NOT queued: it waited"
            if p.torch_waits:
                note += " (torch's own call waits too)"
            elif not last.queued:
                waited.append(p.name)
            gated.append(p.name)
        outcomes.append(Outcome(p.name, ok, f"{why}, {last.ms:.2f} ms{note}"))
    if device.type == "cuda" or gated:  # none gated on CUDA: every launch failed
        outcomes.append(Outcome(
            "no synchronization", bool(gated) and not waited,
            f"{len(gated) - len(waited)} of {len(gated)} gated launches returned with their "
            f"stream held, or waited only where torch's own call does" +
            (f"; ms_aten waited in: {', '.join(waited)}" if waited else "")))
        outcomes.append(Outcome(
            "stream order", bool(gated) and all(o.passed for o in outcomes if o.name in gated),
            f"{len(gated)} gated launches: inputs uploaded and outputs filled behind the gate, "
            f"results read after an event on the kernel's stream match torch"))
    return outcomes


def run_launcher(launcher: Path, library: Path, folder: Path, device: torch.device,
                 timeout: float = 80) -> subprocess.CompletedProcess:
    return subprocess.run([str(launcher), "--device", device.type, str(library),
                           str(folder / PLAN)], capture_output=True, text=True, timeout=timeout)
