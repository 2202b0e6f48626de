"""Every quantized tensor type Kiln reads from GGUF, as random blocks, with
the values gguf-py (llama.cpp's own Python package, in the PyTorch 2
environment: bench/torch2_venv.sh) dequantizes them to: the reference for
Kiln's dequantizers (tests/test_gguf.cpp). Each type's f16 scale fields are
set to finite values; every other bit is random.
    $(bench/torch2_venv.sh) tests/hf/make_gguf_quants_fixture.py   # -> tests/hf/fixtures/gguf-quants.gguf
"""
import os

import numpy as np
import gguf

OUT = os.path.join(os.path.dirname(__file__), "fixtures", "gguf-quants.gguf")
T = gguf.GGMLQuantizationType
# type: byte offsets of its f16 fields within a block
HALVES = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q2_K: [80, 82], T.Q3_K: [108],
          T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.IQ4_NL: [0], T.IQ4_XS: [0]}


def main():
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(OUT, arch="test")
    for qtype, halves in HALVES.items():
        block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        rows, blocks = 3, max(1, 512 // block_values)
        raw = rng.integers(0, 256, size=(rows * blocks, block_bytes), dtype=np.uint8)
        for at in halves:
            raw[:, at:at + 2] = rng.normal(0, 0.05, size=rows * blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
        raw = raw.reshape(rows, blocks * block_bytes)
        w.add_tensor(qtype.name.lower(), raw, raw_dtype=qtype)
        w.add_tensor(qtype.name.lower() + ".values", gguf.quants.dequantize(raw, qtype).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
