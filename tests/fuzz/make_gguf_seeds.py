#!/usr/bin/env python3
"""Writes the GGUF fuzzer's architecture seeds (tests/fuzz/corpus/gguf/arch-*.gguf)
from the architecture fixtures (tests/hf/fixtures/gguf-archs): each file's
metadata without the tokenizer's arrays, and only the tensors its config reads
(token_embd, output, the first attention output bias, RoPE factors), with the
embedding's vocabulary cut to 8 rows, so each seed is a few KB.

Needs gguf-py (llama.cpp's): PYTHONPATH=.../llama.cpp/gguf-py python3 tests/fuzz/make_gguf_seeds.py [ENCODER.gguf ...]
ENCODER.gguf: an encoder's file (F32, through tests/hf/convert_fixture_to_gguf.py: tests/hf/fixtures/embed-minilm
for bert, cli.hf_embed's hub-style copy of embed-nomic-bert for nomic-bert), written as arch-ARCH.gguf with its
position and token-type embeddings too (given encoder files, only their seeds are written); a reranker's
(cli.hf_embed's conversion of tests/hf/fixtures/rerank-xlmr) as arch-ARCH-rerank.gguf, with its head ("cls", "cls.output");
EmbeddingGemma's (cli.hf_embed's conversion of tests/hf/fixtures/embed-gemma3) as arch-gemma-embedding.gguf.
"""
import pathlib
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType

ROOT = pathlib.Path(__file__).resolve().parents[2]
KEPT = ("token_embd.weight", "output.weight", "blk.0.attn_output.bias", "rope_freqs.weight",
        "rope_factors_long.weight", "rope_factors_short.weight")
ENCODER_KEPT = KEPT + ("position_embd.weight", "token_types.weight", "cls.weight", "cls.output.weight")


def field_value(field):
    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        return [field.parts[i].tolist()[0] if field.types[1] != GGUFValueType.STRING
                else bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data], field.types[1]
    if kind == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace"), kind
    return field.parts[field.data[0]].tolist()[0], kind


def write_seed(source, target, kept=KEPT):
    reader = GGUFReader(source)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    writer = GGUFWriter(target, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name.startswith("tokenizer.ggml."):
            continue
        value, kind = field_value(field)
        if field.types[0] == GGUFValueType.ARRAY:  # (a classifier's output labels)
            writer.add_key_value(name, value, GGUFValueType.ARRAY, sub_type=kind)
        else:
            writer.add_key_value(name, value, kind)
    for t in reader.tensors:
        if t.name not in kept:
            continue
        data = np.asarray(t.data, dtype=np.float32)
        if t.name in ("token_embd.weight", "output.weight"):
            data = data.reshape(-1, int(t.shape[0]))[:8]  # 8 tokens of the vocabulary
        writer.add_tensor(t.name, np.ascontiguousarray(data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    out = ROOT / "tests/fuzz/corpus/gguf"
    seeds = [(source, out / f"arch-{source.stem}.gguf", KEPT)
             for source in sorted((ROOT / "tests/hf/fixtures/gguf-archs").glob("*.gguf"))] if len(sys.argv) == 1 else []
    for source in sys.argv[1:]:
        reader = GGUFReader(source)
        arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
        rerank = "-rerank" if any(t.name == "cls.output.weight" for t in reader.tensors) else ""
        seeds.append((pathlib.Path(source), out / f"arch-{arch}{rerank}.gguf", ENCODER_KEPT))
    for source, target, kept in seeds:
        write_seed(str(source), str(target), kept)
        print(target.relative_to(ROOT), target.stat().st_size, "bytes")


if __name__ == "__main__":
    sys.exit(main())
