"""The error a capture raises, below every module of the program route that raises it."""
from __future__ import annotations


class CaptureError(RuntimeError):
    """A torch module or function that cannot become an ms_aten program."""
