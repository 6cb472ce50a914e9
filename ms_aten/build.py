"""`python -m ms_aten.build SOURCE.cpp [-o OUT.so]`: compile your own AOT kernel or torch
extension (ms_aten/native/build.py does it; this module is its command line and public face)."""
import sys

from .native.build import BuildError, build, main

__all__ = ["BuildError", "build", "main"]

if __name__ == "__main__":
    sys.exit(main())
