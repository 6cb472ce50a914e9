"""ms_aten: PyTorch's ATen operators as MindSpore operators.

    import ms_aten
    relu = ms_aten.op("leaky_relu", negative_slope=0.2)   # a mindspore ops.Custom

The package's face: the layers behind it are ms_aten.native (the compiled library and plain
conversions), ms_aten.ops (one op as a primitive), ms_aten.programs (a whole graph as one) and
ms_aten.optim (torch's optimizers over ATen's fused kernels) and ms_aten.nn (torch's losses as
MindSpore loss Cells).
"""
import torch  # noqa: F401  (before the rest: libms_aten.so needs libtorch loaded)

from . import nn, optim
from ._version import __version__
from .decoding.causal_lm import CausalLM, causal_lm
from .decoding.generate import GenerateOutput, generate
from .native.build import BuildError
from .native.convert import to_ms, to_torch
from .native.host import request_blocking_run as _request_blocking_run
from .native.library import host_read_count, launch_count
from .native.library import load as _load_library
from .native.memory import cached_bytes, empty_cache
from .native.memory import check_environment as _check_memory_environment
from .native.threads import configure_from_environment as _configure_threads
from .native.threads import get_num_threads, set_num_threads
from .ops.bounded import ValueDependentOp
from .ops.constants import ConstantError
from .ops.infer import ShapeInferenceError, ValueDependentError
from .ops.op import AtenOp, op
from .programs.base import CaptureError
from .programs.capture.opaque import OpaqueWarning, opaque
from .programs.compile.compiled import CompileCacheWarning, CompileWarning
from .programs.function import TorchFunction, function
from .programs.module import TorchModule, module
from .programs.runtime.primitive import AtenFunction
from .programs.runtime.verify import VerificationError
from .programs.stored.store import CaptureCacheWarning

_request_blocking_run()  # before MindSpore's first task reads it (native/host.py)
_load_library()  # fail at import, with a rebuild hint, if the bridge library is missing or stale
_configure_threads()
_check_memory_environment()

__all__ = ["AtenFunction", "AtenOp", "BuildError", "CaptureCacheWarning", "CaptureError",
           "CausalLM", "CompileCacheWarning", "CompileWarning", "ConstantError", "GenerateOutput",
           "OpaqueWarning", "ShapeInferenceError", "TorchFunction", "TorchModule",
           "ValueDependentError", "ValueDependentOp", "VerificationError", "__version__",
           "cached_bytes", "causal_lm", "empty_cache", "function", "generate", "get_num_threads",
           "host_read_count", "launch_count", "module", "nn", "op", "opaque", "optim",
           "set_num_threads", "to_ms", "to_torch"]
