#!/usr/bin/env python3
"""Real tokenizer vocabularies and what `tokenizers` makes of them: the
oracle for Kiln's tokenizer on the files models ship (tests/cli/hf_vocabs.sh).

    $(bench/torch2_venv.sh) tests/hf/make_vocab_fixtures.py LLAMA_CPP_MODELS_DIR OUT

llama.cpp's tokenizer test files (models/ggml-vocab-*.gguf, with the test
strings of their .inp files) are converted to tokenizer.json by transformers
(AutoTokenizer.from_pretrained(dir, gguf_file=...)); each OUT/NAME/ gets the
tokenizer.json and expected.json: every test string's ids from `tokenizers`,
with and without special tokens. Variants then put in what real files carry
and the conversion leaves out: Qwen2's NFC normalizer with an empty
continuing_subword_prefix and end_of_word_suffix (as transformers 5 saves
Qwen2, Qwen2.5 and Qwen3), the NFKC and NFKD normalizers, and Phi-3's added
tokens with rstrip (and lstrip, single_word and normalized ones). The folders
are large (70 MB in all), so they live in a cache, not in the repository.
Unigram vocabularies (T5's and XLM-RoBERTa's kind) come from a SentencePiece
unigram model trained here on Debian's fortunes and converted by
transformers' own T5 and XLM-RoBERTa converters (Precompiled normalizer:
SentencePiece's NFKC rules). llama.cpp's Unigram GGUF vocabularies (a real
XLM-RoBERTa one) get SentencePiece's own ids, from the model rebuilt out of
the file (gguf-NAME/).
"""
import json
import os
import sys

EXTRA = [
    "caf\u00e9 cafe\u0301 \u212b \ufb01ne \u2460 \uff21\uff22 \u00bd",  # composed, decomposed, compatibility forms
    "Hi<|end|>  there <|user|> x<|assistant|>\n\nok",
    "a <mask> b <mask>c <sw> x<sw> <sw>y [norm] a[norm]b",
    " leading and trailing  ",
]

VARIANTS = {
    # name: (base vocabulary, edit)
    "qwen2-nfc": ("qwen2", lambda t: (t.update(normalizer={"type": "NFC"}),
                                      t["model"].update(continuing_subword_prefix="", end_of_word_suffix=""))),
    "qwen2-nfkc": ("qwen2", lambda t: t.update(normalizer={"type": "NFKC"})),
    "gpt-2-nfkd": ("gpt-2", lambda t: t.update(normalizer={"type": "NFKD"})),
    "phi-3-added": ("phi-3", lambda t: edit_added(t)),
}


def edit_added(t):
    for a in t["added_tokens"]:
        if a["content"] in ("<|end|>", "<|user|>", "<|assistant|>"):
            a["rstrip"] = True  # as microsoft/Phi-3-mini's tokenizer.json has them
    next_id = max(max(t["model"]["vocab"].values()), max(a["id"] for a in t["added_tokens"])) + 1
    t["added_tokens"] += [
        {"id": next_id, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False,
         "normalized": False, "special": True},  # XLM-RoBERTa's mask
        {"id": next_id + 1, "content": "<sw>", "single_word": True, "lstrip": False, "rstrip": False,
         "normalized": False, "special": False},
        {"id": next_id + 2, "content": "[norm]", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": True, "special": False},
    ]


def unigram_vocabularies(out, inputs):
    """t5-unigram and xlmr-unigram: a SentencePiece unigram model of fortunes, converted as transformers converts
    T5's and XLM-RoBERTa's spiece.model files."""
    import glob
    import tempfile
    import types
    import sentencepiece as spm
    from transformers.convert_slow_tokenizer import T5Converter, XLMRobertaConverter
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "fortunes.txt")
        with open(corpus, "w", encoding="utf-8") as fh:
            for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
                if "." not in os.path.basename(f):
                    fh.write(open(f, encoding="utf-8", errors="replace").read())
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(tmp, "spiece"), vocab_size=2000,
                                       model_type="unigram", character_coverage=0.9995, minloglevel=2)
        model = os.path.join(tmp, "spiece.model")
        sp = spm.SentencePieceProcessor(model_file=model)
        original = types.SimpleNamespace(vocab_file=model, _extra_ids=100, mask_token="<mask>",
                                         convert_tokens_to_ids=sp.piece_to_id)
        for name, converter in (("t5-unigram", T5Converter), ("xlmr-unigram", XLMRobertaConverter)):
            d = os.path.join(out, name)
            os.makedirs(d, exist_ok=True)
            converter(original).converted().save(os.path.join(d, "tokenizer.json"))
            with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as fh:
                json.dump(expected_for(os.path.join(d, "tokenizer.json"), inputs), fh, ensure_ascii=False)


# Texts for the multilingual Unigram vocabularies (XLM-RoBERTa's 250K pieces).
MULTILINGUAL = [
    "Der schnelle braune Fuchs springt \u00fcber den faulen Hund.",
    "\u4eca\u65e5\u306f\u3044\u3044\u5929\u6c17\u3067\u3059\u306d\u3002 \u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!  \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\t tabs\tand\r\nnewlines \u00a0no-break\u3000ideographic  ",
]


def gguf_unigram_vocabularies(src, out, inputs):
    """llama.cpp's test vocabularies of the Unigram kind ("t5": nomic-bert-moe's is XLM-RoBERTa's real 250K pieces),
    which have no .inp/.out files: each as the SentencePiece model it was converted from (its pieces, scores, types
    and normalizer spec: precompiled charsmap, add_dummy_prefix, remove_extra_whitespaces), whose own encode gives
    the ids (OUT/gguf-NAME/expected.json)."""
    from gguf import GGUFReader
    from sentencepiece import SentencePieceProcessor
    from sentencepiece import sentencepiece_model_pb2 as pb
    made = 0
    for f in sorted(os.listdir(src)):
        if not (f.startswith("ggml-vocab-") and f.endswith(".gguf")):
            continue
        name = "gguf-" + f[len("ggml-vocab-"):-len(".gguf")]
        d, other = os.path.join(out, name), os.path.join(out, f".{name}.not-unigram")
        if os.path.exists(os.path.join(d, "expected.json")) or os.path.exists(other):
            made += os.path.exists(os.path.join(d, "expected.json"))
            continue
        fields = GGUFReader(os.path.join(src, f)).fields
        if bytes(fields["tokenizer.ggml.model"].parts[-1]).decode() != "t5":
            os.makedirs(out, exist_ok=True)
            open(other, "w").close()  # remembered: reading a file's fields takes seconds
            continue
        parts = lambda key: [fields[key].parts[i] for i in fields[key].data]
        value = lambda key, default: fields[key].parts[-1][0] if key in fields else default
        m = pb.ModelProto()
        for token, score, kind in zip(parts("tokenizer.ggml.tokens"), parts("tokenizer.ggml.scores"),
                                      parts("tokenizer.ggml.token_type")):
            piece = m.pieces.add()
            piece.piece, piece.score, piece.type = bytes(token).decode("utf-8"), float(score[0]), int(kind[0])
        m.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
        m.trainer_spec.unk_id = int(value("tokenizer.ggml.unknown_token_id", 2))
        m.trainer_spec.bos_id = int(value("tokenizer.ggml.bos_token_id", -1))
        m.trainer_spec.eos_id = int(value("tokenizer.ggml.eos_token_id", 1))
        m.trainer_spec.pad_id = int(value("tokenizer.ggml.padding_token_id", -1))
        m.normalizer_spec.precompiled_charsmap = bytes(int(b[0]) & 0xFF
                                                       for b in parts("tokenizer.ggml.precompiled_charsmap"))
        m.normalizer_spec.add_dummy_prefix = bool(value("tokenizer.ggml.add_space_prefix", False))
        m.normalizer_spec.remove_extra_whitespaces = bool(value("tokenizer.ggml.remove_extra_whitespaces", False))
        m.normalizer_spec.escape_whitespaces = True
        sp = SentencePieceProcessor(model_proto=m.SerializeToString())
        # SentencePiece spells a control token's text (<mask>) as pieces where llama-server and transformers match
        # it whole: the strings that hold one are left out.
        controls = [p.piece for p in m.pieces if p.type == pb.ModelProto.SentencePiece.CONTROL]
        kept = [s for s in inputs if not any(c in s for c in controls)]
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as fh:
            json.dump({"gguf": f, "inputs": kept, "ids": [sp.encode(s) for s in kept]}, fh, ensure_ascii=False)
        made += 1
        print(f"{f}: {len(kept)} strings through SentencePiece", file=sys.stderr)
    return made


def expected_for(path, inputs):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    return {"inputs": inputs,
            "ids": [tok.encode(s, add_special_tokens=False).ids for s in inputs],
            "ids_with_special": [tok.encode(s).ids for s in inputs]}


def main():
    src, out = sys.argv[1], sys.argv[2]
    made = 0
    for f in sorted(os.listdir(src)):
        if not (f.startswith("ggml-vocab-") and f.endswith(".gguf") and os.path.exists(os.path.join(src, f + ".inp"))):
            continue
        name = f[len("ggml-vocab-"):-len(".gguf")]
        d = os.path.join(out, name)
        left_out = os.path.join(out, f".{name}.left-out")  # remembered, so that later runs do not retry it
        if os.path.exists(os.path.join(d, "expected.json")) or os.path.exists(left_out):
            made += os.path.exists(os.path.join(d, "expected.json"))
            continue
        try:
            from transformers import AutoTokenizer  # only when there is one to make: the import takes seconds
            tok = AutoTokenizer.from_pretrained(src, gguf_file=f)
        except Exception as e:  # transformers cannot read every architecture's GGUF (bert, mpt, ...)
            print(f"{f}: transformers cannot convert it ({type(e).__name__}); left out", file=sys.stderr)
            os.makedirs(out, exist_ok=True)
            open(left_out, "w").write(f"{type(e).__name__}: {e}\n")
            continue
        tok.save_pretrained(d)
        with open(os.path.join(src, f + ".inp"), encoding="utf-8") as fh:
            inputs = fh.read().split("\n__ggml_vocab_test__\n")
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as fh:
            json.dump(expected_for(os.path.join(d, "tokenizer.json"), inputs + EXTRA), fh, ensure_ascii=False)
        made += 1
        print(f"{name}: {len(inputs)} strings", file=sys.stderr)
    for name, (base, edit) in VARIANTS.items():
        d = os.path.join(out, name)
        if os.path.exists(os.path.join(d, "expected.json")) or not os.path.exists(os.path.join(out, base)):
            made += os.path.exists(os.path.join(d, "expected.json"))
            continue
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(out, base, "tokenizer.json"), encoding="utf-8") as fh:
            t = json.load(fh)
        edit(t)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as fh:
            json.dump(t, fh, ensure_ascii=False)
        with open(os.path.join(out, base, "expected.json"), encoding="utf-8") as fh:
            inputs = json.load(fh)["inputs"]
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as fh:
            json.dump(expected_for(os.path.join(d, "tokenizer.json"), inputs), fh, ensure_ascii=False)
        made += 1
    if not os.path.exists(os.path.join(out, "xlmr-unigram", "expected.json")):
        with open(os.path.join(src, "ggml-vocab-llama-spm.gguf.inp"), encoding="utf-8") as fh:
            unigram_vocabularies(out, fh.read().split("\n__ggml_vocab_test__\n") + EXTRA)
    made += 2
    with open(os.path.join(src, "ggml-vocab-llama-spm.gguf.inp"), encoding="utf-8") as fh:
        made += gguf_unigram_vocabularies(src, out, fh.read().split("\n__ggml_vocab_test__\n") + EXTRA + MULTILINGUAL)
    print(f"{made} vocabularies in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
