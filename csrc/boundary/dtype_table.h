// The one dtype table of ms_aten: the 15 dtypes MindSpore 2.10 hands to AOT kernels, by the
// name MindSpore gives them (its AOT dtype strings, and mindspore.<name> in Python; torch shares
// the names), each with its ATen ScalarType and its MindSpore TypeId:
//
//   X(name, ATen ScalarType enumerator, MindSpore TypeId enumerator)
//
// Read by csrc/boundary/ms_ext.cpp (torch side), csrc/pyboost/fast_path.cpp (MindSpore side, the
// old C++ ABI) and, through ms_ext.cpp's ms_aten_dtype_* C API, by ms_aten/native/dtypes.py, which
// checks at import that torch and MindSpore agree with it. Plain preprocessor: no includes, no ABI.
#pragma once

#define MS_ATEN_DTYPES(X)                            \
  X("float16", Half, kNumberTypeFloat16)             \
  X("bfloat16", BFloat16, kNumberTypeBFloat16)       \
  X("float32", Float, kNumberTypeFloat32)            \
  X("float64", Double, kNumberTypeFloat64)           \
  X("bool", Bool, kNumberTypeBool)                   \
  X("int8", Char, kNumberTypeInt8)                   \
  X("int16", Short, kNumberTypeInt16)                \
  X("int32", Int, kNumberTypeInt32)                  \
  X("int64", Long, kNumberTypeInt64)                 \
  X("uint8", Byte, kNumberTypeUInt8)                 \
  X("uint16", UInt16, kNumberTypeUInt16)             \
  X("uint32", UInt32, kNumberTypeUInt32)             \
  X("uint64", UInt64, kNumberTypeUInt64)             \
  X("complex64", ComplexFloat, kNumberTypeComplex64) \
  X("complex128", ComplexDouble, kNumberTypeComplex128)
