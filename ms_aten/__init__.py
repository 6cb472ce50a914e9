"""ms_aten: PyTorch's ATen operators as MindSpore operators.

    import ms_aten
    relu = ms_aten.op("leaky_relu", negative_slope=0.2)   # a mindspore ops.Custom
"""
import torch  # noqa: F401  (first: libms_aten.so needs libtorch loaded)

from ._lib import launch_count
from ._lib import library as _library
from ._version import __version__
from .bounded import ValueDependentOp
from .build import BuildError
from .constants import ConstantError
from .convert import to_ms, to_torch
from .function import AtenFunction, function
from .infer import ShapeInferenceError, ValueDependentError
from .module import TorchModule, module
from .op import AtenOp, op
from .program import CaptureError
from .threads import configure_from_environment as _configure_threads
from .threads import get_num_threads, set_num_threads

_library()  # fail at import, with a rebuild hint, if the bridge library is missing or stale
_configure_threads()

__all__ = ["AtenFunction", "AtenOp", "BuildError", "CaptureError", "ConstantError",
           "ShapeInferenceError", "TorchModule", "ValueDependentError", "ValueDependentOp",
           "__version__", "function",
           "get_num_threads", "launch_count", "module", "op", "set_num_threads", "to_ms",
           "to_torch"]
