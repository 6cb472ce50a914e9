"""ms_aten: PyTorch's ATen operators as MindSpore operators.

    import ms_aten
    relu = ms_aten.op("leaky_relu", negative_slope=0.2)   # a mindspore ops.Custom
"""
import torch  # noqa: F401  (first: libms_aten.so needs libtorch loaded)

from ._lib import library as _library
from .op import AtenOp, op

_library()  # fail at import, with a rebuild hint, if the bridge library is missing or stale

__all__ = ["AtenOp", "op"]
__version__ = "0.1.0"
