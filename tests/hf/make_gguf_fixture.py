"""A small GGUF file written by llama.cpp's own writer (gguf-py, in the
PyTorch 2 environment: bench/torch2_venv.sh), for tests/test_gguf.cpp and as
the GGUF fuzzer's seed: every metadata value type, nested arrays, and F32, F16,
BF16 and Q8_0 tensors. Two more seeds hold a tokenizer alone (a SentencePiece
vocabulary without merges, and a byte-level BPE one with merges and a
pre-tokenizer type; and a Unigram one, as XLM-RoBERTa's), for the fuzzer's tokenizer half.
    $(bench/torch2_venv.sh) tests/hf/make_gguf_fixture.py   # -> tests/fuzz/corpus/gguf/*.gguf
"""
import os

import numpy as np
import gguf

CORPUS = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "gguf")
OUT = os.path.join(CORPUS, "small.gguf")


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


def vocabularies():
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    spm = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581"] + letters + \
          ["\u2581" + c for c in letters] + ["th", "\u2581th", "\u2581the", "<|im_end|>"]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(spm) - 260) + [3]
    w = gguf.GGUFWriter(os.path.join(CORPUS, "vocab-spm.gguf"), arch="llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(spm)
    w.add_token_scores([-float(i) for i in range(len(spm))])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{% for m in messages %}{{ bos_token }}{{ m['content'] }}{{ eos_token }}{% endfor %}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    byte_level = [chr(c) for c in range(33, 127)] + ["\u0120", "\u0120t", "he", "\u0120the", "<|endoftext|>"]
    w = gguf.GGUFWriter(os.path.join(CORPUS, "vocab-bpe.gguf"), arch="llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(byte_level)
    w.add_token_types([1] * (len(byte_level) - 1) + [3])
    w.add_token_merges(["\u0120 t", "h e", "\u0120t he"])
    w.add_eos_token_id(len(byte_level) - 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def unigram_vocabulary():
    """A Unigram ("t5") vocabulary as llama.cpp's converter writes XLM-RoBERTa's: fairseq's four specials first,
    scores, spaces merged and one prepended (no charsmap: the real ones are 240 KB)."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "\u2581"] + letters + ["\u2581" + c for c in letters] + \
             ["\u2581the", "<mask>", "[PAD56]"]
    w = gguf.GGUFWriter(os.path.join(CORPUS, "vocab-ugm.gguf"), arch="bert")
    w.add_tokenizer_model("t5")
    w.add_tokenizer_pre("default")
    w.add_token_list(pieces)
    w.add_token_scores([0.0] * 4 + [-float(i) / 8 for i in range(len(pieces) - 6)] + [0.0, -10000.0])
    w.add_token_types([3, 3, 3, 2] + [1] * (len(pieces) - 6) + [3, 5])
    w.add_add_space_prefix(True)
    w.add_remove_extra_whitespaces(True)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_unk_token_id(3)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


if __name__ == "__main__":
    main()
    vocabularies()
    unigram_vocabulary()
