"""Sentence embeddings' throughput, sentence-transformers' side of bench/hf/embed_vs_sentence_transformers.sh.

    python embed_peer.py make DIR SHAPE     # a random model of SHAPE (minilm, embeddinggemma) saved at DIR
    python embed_peer.py time DIR TEXTS [threads] [rounds]

`time` prints one JSON line: texts a second of encode() (batches of 32, as its default), best of `rounds` after a
warm-up, on `threads` CPU threads. The models are random (the tokenizer a fortunes-trained fixture's, so texts
tokenize to lengths like real ones); their shapes are all-MiniLM-L6-v2's and embeddinggemma-300m's.
"""
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "tests", "hf", "fixtures")

SHAPES = {
    # sentence-transformers/all-MiniLM-L6-v2: BERT, 6 layers 384 wide, mean pooled, normalised
    "minilm": dict(fixture="embed-minilm", config=dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                                        intermediate_size=1536, max_position_embeddings=512),
                   max_seq_length=256),
    # google/embeddinggemma-300m: Gemma 3 attending both ways, 24 layers 768 wide, 3 heads of 256, one key/value
    # head, sliding layers over 512, mean pooled, 768 -> 3072 -> 768, normalised
    "embeddinggemma": dict(fixture="embed-gemma3",
                           config=dict(hidden_size=768, num_hidden_layers=24, num_attention_heads=3,
                                       num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                                       intermediate_size=1152, max_position_embeddings=2048, sliding_window=512),
                           max_seq_length=2048, dense=[3072, 768]),
}


def make(out, shape):
    import shutil
    import transformers
    from safetensors.torch import save_file
    spec = SHAPES[shape]
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(os.path.join(FIXTURES, spec["fixture"]), out, ignore=shutil.ignore_patterns("expected.json"))
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    config.update(spec["config"])
    config.pop("layer_types", None)  # (the fixture's: of its own layer count)
    config.pop("_sliding_window_pattern", None)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    torch.manual_seed(0)
    transformers.AutoModel.from_config(transformers.AutoConfig.from_pretrained(out)).save_pretrained(out)
    with open(os.path.join(out, "sentence_bert_config.json"), "w") as f:  # the real models' text lengths
        json.dump({"max_seq_length": spec["max_seq_length"], "do_lower_case": False}, f)
    widths = [config["hidden_size"]] + spec.get("dense", [])
    for path, i, o in zip(("2_Dense", "3_Dense"), widths, widths[1:]):
        with open(os.path.join(out, path, "config.json")) as f:
            dense = json.load(f)
        with open(os.path.join(out, path, "config.json"), "w") as f:
            json.dump(dict(dense, in_features=i, out_features=o), f, indent=2)
        save_file({"linear.weight": torch.randn(o, i) * (i ** -0.5)}, os.path.join(out, path, "model.safetensors"))


def time_it(d, texts_path, threads, rounds):
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(threads)
    with open(texts_path, encoding="utf-8") as f:
        texts = f.read().split("\n")
    model = SentenceTransformer(d, device="cpu")
    model.encode(texts[:64], batch_size=32)
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        model.encode(texts, batch_size=32)
        best = min(best, time.perf_counter() - t)
    print(json.dumps({"texts": len(texts), "texts_per_s": len(texts) / best, "threads": threads,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        time_it(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 2,
                int(sys.argv[5]) if len(sys.argv) > 5 else 3)
