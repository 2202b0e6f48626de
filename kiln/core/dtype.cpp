#include "kiln/core/dtype.h"

#include "kiln/core/error.h"

namespace kiln {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

const char* dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

DType dtype_from_safetensors_name(const std::string& n) {
  if (n == "F32") return DType::f32;
  if (n == "F64") return DType::f64;
  if (n == "BF16") return DType::bf16;
  if (n == "F16") return DType::f16;
  if (n == "I32") return DType::i32;
  if (n == "I64") return DType::i64;
  if (n == "U8") return DType::u8;
  KILN_FAIL("unsupported safetensors dtype '", n, "' (Kiln reads F32, F64, BF16, F16, I32, I64, U8)");
}

DType dtype_parse(const std::string& n) {
  if (n == "f32" || n == "float32" || n == "fp32") return DType::f32;
  if (n == "f64" || n == "float64" || n == "fp64") return DType::f64;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "f16" || n == "float16" || n == "fp16" || n == "half") return DType::f16;
  if (n == "i32" || n == "int32") return DType::i32;
  if (n == "i64" || n == "int64") return DType::i64;
  if (n == "u8" || n == "uint8") return DType::u8;
  KILN_FAIL("unknown dtype '", n, "' (expected one of f32, f64, bf16, f16, i32, i64, u8)");
}

bool dtype_is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

}  // namespace kiln
