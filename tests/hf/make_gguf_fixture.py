"""A small GGUF file written by llama.cpp's own writer (gguf-py, in the
PyTorch 2 environment: bench/torch2_venv.sh), for tests/test_gguf.cpp and as
the GGUF fuzzer's seed: every metadata value type, nested arrays, and F32, F16,
BF16 and Q8_0 tensors.
    $(bench/torch2_venv.sh) tests/hf/make_gguf_fixture.py   # -> tests/fuzz/corpus/gguf/small.gguf
"""
import os

import numpy as np
import gguf

OUT = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "gguf", "small.gguf")


def main():
    w = gguf.GGUFWriter(OUT, arch="llama")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.25)
    w.add_uint64("test.u64", 2 ** 40 + 1)
    w.add_int64("test.i64", -(2 ** 40))
    w.add_float64("test.f64", 1e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "caf\u00e9 \u4f60\u597d")
    w.add_array("test.strings", ["a", "", "<0x0A>"])
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.nested", [[1, 2], [3]])
    w.add_context_length(128)
    w.add_tensor("f32", np.arange(6, dtype=np.float32).reshape(2, 3))
    w.add_tensor("f16", np.array([[0.5, -1.5]], dtype=np.float16))
    bf16 = (np.array([1.0, -2.0, 3.5, 0.0], dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    w.add_tensor("bf16", bf16.view(np.uint8).reshape(1, 8), raw_dtype=gguf.GGMLQuantizationType.BF16)
    q = gguf.quants.quantize(np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q8_0", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
