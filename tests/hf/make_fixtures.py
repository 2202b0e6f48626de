#!/usr/bin/env python3
"""Makes the Hugging Face fixtures Kiln's tests load, and what transformers
and tokenizers answer on them (the oracle). Run it in the cached PyTorch 2
virtual environment (bench/torch2_venv.sh installs transformers, tokenizers
and safetensors there):

    $(bench/torch2_venv.sh) tests/hf/make_fixtures.py [OUT]          # tests/hf/fixtures
    $(bench/torch2_venv.sh) tests/hf/make_fixtures.py --speed DIR [--shape tinyllama-1.1b]   # a SmolLM-135M- (or TinyLlama-) shaped Llama
    $(bench/torch2_venv.sh) tests/hf/make_fixtures.py --chat         # only fixtures/chat
    $(bench/torch2_venv.sh) tests/hf/make_fixtures.py --finetune     # only fixtures/finetune
    $(bench/torch2_venv.sh) tests/hf/make_fixtures.py --sentiment DIR  # a DistilBERT-shaped classifier

Tokenizers of the three families are trained on Debian's fortunes; models are
random, at odd sizes (head sizes not a multiple of 16, grouped- and
multi-query attention, a sliding window shorter than the test text, tied and
untied heads, one stored in bf16), initialised wider than transformers'
default so that their logits are far from uniform. Every expected number in
expected.json comes from transformers or tokenizers, never from Kiln.
"""
import argparse
import glob
import json
import os
import shutil
import zlib

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, PreTrainedTokenizerFast
import transformers

FORTUNES = "/usr/share/games/fortunes"
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# What the token-id tests also check, beyond all of fortunes.
EDGE_CASES = [
    "Hello, world!",
    "emoji: \U0001F600\U0001F44D\U0001F3FD and a flag \U0001F1EB\U0001F1F7",
    "CJK: \u4f60\u597d\uff0c\u4e16\u754c\u3002 \u65e5\u672c\u8a9e\u306e\u6587\u7ae0",
    "combining: e\u0301 a\u0308 n\u0303 caf\u00e9 Cr\u00e8me Br\u00fbl\u00e9e",
    "windows\r\nline\r\nends\r\n",
    "runs    of     spaces\t\ttabs  \n\n\n  and 1234567890 0.5 3,141,592 digits",
    "  leading and trailing spaces  ",
    "",
    "I'm sure they'll say you've DON'T it's",
    "<s> not special in text </s> [CLS] <|endoftext|>",
]


def fortunes():
    """Every fortune of every file, in a fixed order, as the tests read them."""
    out = []
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if path.endswith(".dat") or path.endswith(".u8") or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        out.append((os.path.basename(path), [t for t in text.split("\n%\n") if t.strip()]))
    return out


def all_fortune_texts():
    return [t for _, texts in fortunes() for t in texts]


def byte_level_bpe(pattern, vocab_size, specials, bos=None):
    """GPT-2 style (pattern GPT2_PATTERN) or Llama 3 style byte-level BPE."""
    tok = Tokenizer(models.BPE(ignore_merges=pattern == LLAMA3_PATTERN))
    if pattern == GPT2_PATTERN:  # spelled as GPT-2's own tokenizer.json does
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:  # and as Llama 3's does
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(pattern=tokenizers_regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(all_fortune_texts(), trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def bos_eos(tok, bos, eos):
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} $B {eos}",
        special_tokens=[(bos, tok.token_to_id(bos)), (eos, tok.token_to_id(eos))])
    return tok


def tokenizers_regex(pattern):
    from tokenizers import Regex
    return Regex(pattern)


def sentencepiece_bpe(vocab_size, metaspace):
    """Llama 2 / Mistral / TinyLlama: BPE over '▁'-joined text with byte
    fallback. metaspace=False spells the '▁' handling as Llama 2's
    tokenizer.json does (Prepend + Replace normalizers), True as Mistral's
    newer ones do (a Metaspace pre-tokenizer)."""
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 259, show_progress=False)
    trainer_tok.train_from_iterator(all_fortune_texts(), trainer)
    learned = json.loads(trainer_tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = 3 + b
    for piece in sorted(learned["vocab"], key=lambda p: learned["vocab"][p]):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(content=" ", left=1, right=0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok


def roberta_bpe(vocab_size):
    """RoBERTa's: GPT-2's byte-level BPE, <s> A </s> by RobertaProcessing, <pad> = 1."""
    tok = byte_level_bpe(GPT2_PATTERN, vocab_size, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    return tok


def wordpiece(vocab_size):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(all_fortune_texts(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def xlmr_unigram(vocab_size):
    """XLM-RoBERTa's kind: a SentencePiece unigram model (of fortunes here) converted as transformers converts its
    sentencepiece.bpe.model (the Precompiled normalizer: SentencePiece's NFKC rules; Metaspace; <s> A </s>)."""
    import tempfile
    import types
    import sentencepiece as spm
    from transformers.convert_slow_tokenizer import XLMRobertaConverter
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "fortunes.txt")
        with open(corpus, "w", encoding="utf-8") as fh:
            fh.write("\n".join(all_fortune_texts()))
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(tmp, "spiece"), vocab_size=vocab_size,
                                       model_type="unigram", character_coverage=0.9995, minloglevel=2,
                                       num_threads=1)
        model = os.path.join(tmp, "spiece.model")
        sp = spm.SentencePieceProcessor(model_file=model)
        # XLMRobertaTokenizer's ids: fairseq's four first, SentencePiece's after them (offset 1), <mask> last.
        fairseq = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": sp.get_piece_size() + 1}
        original = types.SimpleNamespace(vocab_file=model, mask_token="<mask>",
                                         convert_tokens_to_ids=lambda t: fairseq.get(t, sp.piece_to_id(t) + 1))
        with open(model, "rb") as fh:  # shipped beside tokenizer.json, as XLM-R's repositories ship it
            return XLMRobertaConverter(original).converted(), fh.read()


TOKENIZERS = {
    "gpt2": lambda: (byte_level_bpe(GPT2_PATTERN, 600, ["<|endoftext|>"]),
                     dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")),
    "llama3": lambda: (byte_level_bpe(LLAMA3_PATTERN, 640, ["<|begin_of_text|>", "<|end_of_text|>"],
                                      bos="<|begin_of_text|>"),
                       dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")),
    # A decoder embedder's: its eos pads a batch (as Qwen3-Embedding's <|endoftext|> does).
    "llama3-pad": lambda: (byte_level_bpe(LLAMA3_PATTERN, 640, ["<|begin_of_text|>", "<|end_of_text|>"],
                                          bos="<|begin_of_text|>"),
                           dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
                                pad_token="<|end_of_text|>")),
    # EmbeddingGemma's: <bos> text <eos>, a <pad> of its own (Gemma's tokenizer adds both ends for embedding).
    "gemma-embed": lambda: (bos_eos(byte_level_bpe(LLAMA3_PATTERN, 640, ["<pad>", "<eos>", "<bos>"]), "<bos>", "<eos>"),
                            dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")),
    "llama2": lambda: (sentencepiece_bpe(700, metaspace=False),
                       dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>")),
    "mistral": lambda: (sentencepiece_bpe(700, metaspace=True),
                        dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>")),
    "roberta": lambda: (roberta_bpe(610), dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", sep_token="</s>",
                                               cls_token="<s>", pad_token="<pad>", mask_token="<mask>")),
    "bert": lambda: (wordpiece(620), dict(unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                                          cls_token="[CLS]", mask_token="[MASK]")),
    "xlmr": lambda: (lambda tok, model: (tok, dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                                   sep_token="</s>", cls_token="<s>", pad_token="<pad>",
                                                   mask_token="<mask>"),
                                         {"sentencepiece.bpe.model": model}))(*xlmr_unigram(700)),
}

# name -> (tokenizer, config). Sizes are odd on purpose; see the docstring.
COMMON = dict(initializer_range=0.25)
CAUSAL = {
    "gpt2": ("gpt2", dict(model_type="gpt2", n_embd=40, n_head=2, n_layer=2, n_positions=96,
                          activation_function="gelu_new", tie_word_embeddings=True)),
    "llama-gqa": ("llama3", dict(model_type="llama", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                                 intermediate_size=100, num_hidden_layers=2, max_position_embeddings=128,
                                 rope_theta=500000.0, tie_word_embeddings=False, rms_norm_eps=1e-5,
                                 rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                   high_freq_factor=4.0, original_max_position_embeddings=16))),
    "llama-mqa-tied": ("llama2", dict(model_type="llama", hidden_size=45, num_attention_heads=3,
                                      num_key_value_heads=1, head_dim=20, intermediate_size=72,
                                      num_hidden_layers=3, max_position_embeddings=96, attention_bias=True,
                                      tie_word_embeddings=True, rms_norm_eps=1e-6)),
    "llama-bf16": ("llama2", dict(model_type="llama", hidden_size=48, num_attention_heads=2, num_key_value_heads=2,
                                  intermediate_size=88, num_hidden_layers=2, max_position_embeddings=96,
                                  tie_word_embeddings=False, dtype="bfloat16")),
    "mistral": ("mistral", dict(model_type="mistral", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                                head_dim=12, intermediate_size=80, num_hidden_layers=2, max_position_embeddings=128,
                                sliding_window=8, rope_theta=10000.0, tie_word_embeddings=False)),
    "qwen2": ("llama3", dict(model_type="qwen2", hidden_size=40, num_attention_heads=5, num_key_value_heads=1,
                             intermediate_size=72, num_hidden_layers=2, max_position_embeddings=128,
                             rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False)),
    # head_dim apart from hidden_size / heads (12, not 10), as Qwen3's 128 for 5120 / 64 is
    "qwen3": ("llama3", dict(model_type="qwen3", hidden_size=40, num_attention_heads=4, num_key_value_heads=2,
                             head_dim=12, intermediate_size=72, num_hidden_layers=3, max_position_embeddings=128,
                             rope_theta=1000000.0, tie_word_embeddings=True, rms_norm_eps=1e-6)),
    "olmo2": ("llama2", dict(model_type="olmo2", hidden_size=42, num_attention_heads=3, num_key_value_heads=1,
                             intermediate_size=70, num_hidden_layers=2, max_position_embeddings=128,
                             rope_theta=500000.0, tie_word_embeddings=False, rms_norm_eps=1e-6)),
    "granite": ("llama3", dict(model_type="granite", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=80, num_hidden_layers=2, max_position_embeddings=128,
                               embedding_multiplier=12.0, attention_multiplier=0.0078125, residual_multiplier=0.22,
                               logits_scaling=8.0, tie_word_embeddings=True)),
    # Every RoPE scaling transformers' ROPE_INIT_FUNCTIONS has for these
    # families, each over an original context of 16 positions that the score
    # text and greedy generation pass (longrope switches factors there).
    "rope-linear": ("llama2", dict(model_type="llama", hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                   intermediate_size=48, num_hidden_layers=1, max_position_embeddings=128,
                                   rope_scaling=dict(rope_type="linear", factor=4.0))),
    "rope-dynamic": ("llama2", dict(model_type="llama", hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                                    intermediate_size=48, num_hidden_layers=1, max_position_embeddings=128,
                                    rope_scaling=dict(rope_type="dynamic", factor=2.0))),
    "rope-yarn": ("llama3", dict(model_type="qwen2", hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                 intermediate_size=48, num_hidden_layers=1, max_position_embeddings=128,
                                 rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                                 rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=16))),
    "rope-longrope": ("llama2", dict(model_type="llama", hidden_size=48, num_attention_heads=2, num_key_value_heads=2,
                                     intermediate_size=48, num_hidden_layers=1, max_position_embeddings=128,
                                     rope_scaling=dict(rope_type="longrope", original_max_position_embeddings=16,
                                                       short_factor=[1.0 + 0.05 * i for i in range(12)],
                                                       long_factor=[1.0 + 0.5 * i for i in range(12)]))),
    # Phi-4-mini's shape of Phi-3: fused qkv_proj and gate_up_proj, 3/4 of each
    # head rotating, longrope past 16 positions, a sliding window of 24.
    "phi3": ("llama2", dict(model_type="phi3", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                            intermediate_size=72, num_hidden_layers=2, max_position_embeddings=128,
                            original_max_position_embeddings=16, sliding_window=24, partial_rotary_factor=0.75,
                            rope_scaling=dict(rope_type="longrope", short_factor=[1.0 + 0.1 * i for i in range(6)],
                                              long_factor=[1.0 + 0.7 * i for i in range(6)]),
                            tie_word_embeddings=False, pad_token_id=None)),
    # Layers 0, 1, 3 and 5 rotate, 2 and 4 do not (SmolLM3-3B's pattern is every fourth without).
    "smollm3": ("llama3", dict(model_type="smollm3", hidden_size=36, num_attention_heads=3, num_key_value_heads=3,
                               intermediate_size=64, num_hidden_layers=5, max_position_embeddings=128,
                               no_rope_layers=[1, 1, 0, 1, 0], rope_theta=5000000.0, tie_word_embeddings=True,
                               pad_token_id=None)),
    # Gemma: norms of 1 + w, GeGLU, the embedding times sqrt(hidden); MQA, tied.
    "gemma": ("llama2", dict(model_type="gemma", hidden_size=40, num_attention_heads=4, num_key_value_heads=1,
                             head_dim=12, intermediate_size=72, num_hidden_layers=2, max_position_embeddings=128,
                             hidden_act="gelu_pytorch_tanh")),
    # Gemma 2: sliding layers (window 6) between global ones, soft caps small
    # enough to bend most scores and logits, a query_pre_attn_scalar apart from head_dim; untied.
    "gemma2": ("llama2", dict(model_type="gemma2", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=10, intermediate_size=80, num_hidden_layers=3, max_position_embeddings=128,
                              sliding_window=6, query_pre_attn_scalar=20, attn_logit_softcapping=4.0,
                              final_logit_softcapping=3.0, tie_word_embeddings=False)),
    # Gemma 3 (text): q/k norms, layer_types past one pattern, the local RoPE
    # base on sliding layers and linear scaling on the global one only.
    "gemma3": ("llama3", dict(model_type="gemma3_text", hidden_size=36, num_attention_heads=3, num_key_value_heads=1,
                              head_dim=14, intermediate_size=64, num_hidden_layers=4, max_position_embeddings=128,
                              sliding_window=5, query_pre_attn_scalar=16,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                           "sliding_attention"],
                              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                               "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                  "rope_theta": 1000000.0}})),
    # Gemma 3 as its 4B and larger models ship: multimodal (Gemma3ForConditionalGeneration), the text
    # model under language_model, a small vision tower Kiln leaves unread.
    "gemma3-vision": ("llama3", dict(model_type="gemma3", mm_tokens_per_image=4,
                                     text_config=dict(hidden_size=36, num_attention_heads=3, num_key_value_heads=1,
                                                      head_dim=14, intermediate_size=64, num_hidden_layers=3,
                                                      max_position_embeddings=128, sliding_window=5,
                                                      query_pre_attn_scalar=16, sliding_window_pattern=2),
                                     vision_config=dict(model_type="siglip_vision_model", hidden_size=32,
                                                        intermediate_size=40, num_hidden_layers=1,
                                                        num_attention_heads=2, image_size=28, patch_size=14))),
    # Mixtures of experts, saved by transformers 5 with each layer's experts
    # fused (experts.gate_up_proj, experts.down_proj). Mixtral renormalises
    # its top 2 of 4; the load-balancing loss is on (output_router_logits), so
    # the training step's loss and gradients include it.
    "mixtral": ("llama2", dict(model_type="mixtral", hidden_size=40, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=56, num_hidden_layers=2, max_position_embeddings=128,
                               num_local_experts=4, num_experts_per_tok=2, output_router_logits=True,
                               router_aux_loss_coef=0.02, tie_word_embeddings=False)),
    # Qwen3-MoE: per-head q/k norms, a dense MLP in layer 1 (mlp_only_layers), experts narrower than it.
    "qwen3-moe": ("llama3", dict(model_type="qwen3_moe", hidden_size=36, num_attention_heads=3, num_key_value_heads=1,
                                 head_dim=14, intermediate_size=64, moe_intermediate_size=24, num_experts=6,
                                 num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
                                 num_hidden_layers=3, max_position_embeddings=128, tie_word_embeddings=True)),
    # OLMoE: q/k norms over the whole projections, top 3 of 5 not renormalised, the load-balancing loss on.
    # (No pad id: OLMoE's default, 1, is this tokenizer's <s>, whose zeroed row would route with five-way
    # ties, which torch.topk breaks its own way.)
    "olmoe": ("llama2", dict(model_type="olmoe", hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=40, num_experts=5, num_experts_per_tok=3, norm_topk_prob=False,
                             num_hidden_layers=2, max_position_embeddings=128, output_router_logits=True,
                             router_aux_loss_coef=0.01, tie_word_embeddings=False, pad_token_id=None)),
}
CLASSIFIERS = {
    "bert": ("bert", dict(model_type="bert", hidden_size=36, num_attention_heads=3, num_hidden_layers=2,
                          intermediate_size=60, max_position_embeddings=64, type_vocab_size=2,
                          id2label={0: "negative", 1: "neutral", 2: "positive"})),
    "distilbert": ("bert", dict(model_type="distilbert", dim=40, n_heads=2, n_layers=2, hidden_dim=68,
                                max_position_embeddings=64, id2label={0: "NEGATIVE", 1: "POSITIVE"})),
    # RoBERTa's positions start after its padding id (max_position_embeddings is 2 more than the context)
    "roberta": ("roberta", dict(model_type="roberta", hidden_size=36, num_attention_heads=3, num_hidden_layers=2,
                                intermediate_size=60, max_position_embeddings=66, type_vocab_size=1,
                                id2label={0: "negative", 1: "neutral", 2: "positive"})),
    "xlm-roberta": ("roberta", dict(model_type="xlm-roberta", hidden_size=32, num_attention_heads=4,
                                    num_hidden_layers=2, intermediate_size=48, max_position_embeddings=66,
                                    type_vocab_size=1, id2label={0: "NEGATIVE", 1: "POSITIVE"})),
    # ModernBERT: a global layer every third (0 and 3), the others within 3 positions either side;
    # mean pooling before the head.
    "modernbert": ("bert", dict(model_type="modernbert", hidden_size=32, num_attention_heads=4, num_hidden_layers=4,
                                intermediate_size=40, max_position_embeddings=64, local_attention=6,
                                global_attn_every_n_layers=3, classifier_pooling="mean",
                                id2label={0: "negative", 1: "neutral", 2: "positive"})),
}

# sentence-transformers folders (tests/test_hf_embeddings.cpp): an encoder
# saved as BertModel/RobertaModel/DistilBertModel, then its pooling, and a
# Normalize module where the flag says. name -> (tokenizer, config, pooling,
# normalize, max_seq_length, layout): "hub" rewrites the folder as the hub's
# older folders are (all-MiniLM-L6-v2's: pooling_mode_* flags,
# sentence_bert_config.json's max_seq_length, sentence_transformers.models.*
# types), "current" keeps what sentence-transformers writes today.
EMBEDDERS = {
    "embed-minilm": ("bert", dict(model_type="bert", hidden_size=36, num_attention_heads=3, num_hidden_layers=2,
                                  intermediate_size=60, max_position_embeddings=64), "mean", True, 16, "hub"),
    "embed-roberta-cls": ("roberta", dict(model_type="roberta", hidden_size=32, num_attention_heads=4,
                                          num_hidden_layers=2, intermediate_size=48, max_position_embeddings=66,
                                          type_vocab_size=1), "cls", False, None, "current"),
    "embed-distilbert-max": ("bert", dict(model_type="distilbert", dim=40, n_heads=2, n_layers=2, hidden_dim=68,
                                          max_position_embeddings=64), "max", True, 12, "current"),
    "embed-modernbert": ("bert", dict(model_type="modernbert", hidden_size=32, num_attention_heads=4,
                                      num_hidden_layers=3, intermediate_size=40, max_position_embeddings=64,
                                      local_attention=8, global_attn_every_n_layers=2), "mean", True, 24, "current"),
    # bge-m3 and multilingual-e5's kind: XLM-RoBERTa with a SentencePiece Unigram vocabulary, [CLS] pooled, normalised.
    "embed-xlmr-cls": ("xlmr", dict(model_type="xlm-roberta", hidden_size=32, num_attention_heads=4,
                                    num_hidden_layers=2, intermediate_size=48, max_position_embeddings=66,
                                    type_vocab_size=1), "cls", True, None, "current"),
    # Qwen3-Embedding's kind: a decoder's body (Qwen3Model), its last token pooled, normalised.
    "embed-qwen3-last": ("llama3-pad", dict(model_type="qwen3", hidden_size=32, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=8, num_hidden_layers=2, intermediate_size=48,
                                        max_position_embeddings=128), "lasttoken", True, None, "current"),
    # EmbeddingGemma's kind: Gemma 3's body attending both ways (five sliding layers over a symmetric window of 3
    # either side, shorter than the longer texts, then a global one: Gemma 3's pattern, which llama.cpp's converter
    # leaves to its loader's default), mean-pooled, its two Dense projections (no bias, identity: up 2x and
    # back), normalised; its prompts (none by default). llama.cpp scales attention by 1/sqrt(head_dim), as
    # query_pre_attn_scalar does here (EmbeddingGemma's 256 is its head_dim).
    "embed-gemma3": ("gemma-embed", dict(model_type="gemma3_text", hidden_size=32, num_attention_heads=2,
                                         num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
                                         intermediate_size=48, num_hidden_layers=6, max_position_embeddings=128,
                                         sliding_window=6, use_bidirectional_attention=True,
                                         rope_parameters={"sliding_attention": {"rope_type": "default",
                                                                                "rope_theta": 10000.0},
                                                          "full_attention": {"rope_type": "default",
                                                                             "rope_theta": 1000000.0}}),
                     "mean", True, None, "current",
                     dict(dense=[(64, False, None), (32, False, None)],
                          prompts={"query": "task: search result | query: ", "document": "title: none | text: "})),
    # A Dense module as sentence-transformers makes one by default: a bias, then tanh.
    "embed-minilm-dense": ("bert", dict(model_type="bert", hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                                        intermediate_size=48, max_position_embeddings=64), "mean", False, None,
                           "current", dict(dense=[(24, True, "tanh")])),
    # nomic-embed-text (transformers' NomicBertModel, which saves the hub checkpoint's names: Wqkv, fc11, fc12, ...).
    "embed-nomic-bert": ("bert", dict(model_type="nomic_bert", hidden_size=32, num_attention_heads=4,
                                      num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64),
                         "mean", False, None, "current"),
}

# Cross-encoders (rerankers: ms-marco MiniLM's kind, BERT with token types; bge-reranker's, XLM-RoBERTa with a
# Unigram vocabulary): a classifier with one label over (query, document) pairs.
CROSS_ENCODERS = {
    "rerank-minilm": ("bert", dict(model_type="bert", hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                                   intermediate_size=48, max_position_embeddings=64, num_labels=1)),
    "rerank-xlmr": ("xlmr", dict(model_type="xlm-roberta", hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                                 intermediate_size=48, max_position_embeddings=66, type_vocab_size=1, num_labels=1)),
}
# Qwen3-Reranker's kind: a causal LM asked whether a document answers a query, scored by its last token's "yes"
# against "no" (its model card's code). Its README names it, as llama.cpp's converter looks for; the tokenizer has
# Qwen's turn marks and "yes" and "no" as tokens.
PROMPT_RERANKERS = {
    "rerank-qwen3": ("llama3-pad", dict(model_type="qwen3", hidden_size=32, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=8, num_hidden_layers=2, intermediate_size=48,
                                        max_position_embeddings=512)),
}
QWEN3_RERANK_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
                       "the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
                       "<|im_start|>user\n")
QWEN3_RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QWEN3_RERANK_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
# A code model's kind for llama-server's /infill: Qwen2.5-Coder's fill-in-the-middle and repository marks.
FIM_MODELS = {
    "fim-qwen2": ("llama3", dict(model_type="qwen2", hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                 num_hidden_layers=2, intermediate_size=48, max_position_embeddings=4096)),
}
FIM_MARKS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"]
RERANK_QUERY = "Which fortune speaks of the future?"
RERANK_DOCUMENTS = ["The best way to predict the future is to invent it.", "You will be hungry again in one hour.",
                    "caf\u00e9 na\u00efve \u4f60\u597d", "", "Whenever you find that you are on the side of the majority, "
                    "it is time to reform: a fortune long enough that a pair of it and the query is cut at the "
                    "model's positions, the longer text first, as transformers' longest_first truncation cuts it."]

SCORE_TEXT = ("A fortune longer than the sliding window: Whenever you find that you are on the side of "
              "the majority, it is time to reform.")
PROMPT = "The best way to predict the future"
CLASSIFY_TEXTS = ["What a wonderful, happy day!", "This is awful.", "caf\u00e9 na\u00efve \u4f60\u597d"]
EMBED_TEXTS = CLASSIFY_TEXTS + ["", "A fortune longer than any max_seq_length here: Whenever you find that you are "
                                    "on the side of the majority, it is time to reform."]

# The chat templates the real models ship (tokenizer_config.json's
# chat_template, as Jinja source), with the bos/eos text they fill in. Kiln
# recognises each family and must render what apply_chat_template renders.
CHAT_TEMPLATES = {
    # HuggingFaceTB/SmolLM-135M-Instruct
    "chatml": ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
               "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
               "{% endif %}", "<|im_start|>", "<|im_end|>"),
    # Qwen/Qwen2-0.5B-Instruct: ChatML with a default system turn
    "chatml-qwen2": ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                     "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                     "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                     "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
                     None, "<|im_end|>"),
    # meta-llama/Llama-2-7b-chat-hf
    "llama2": ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
               "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
               "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0)"
               " %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
               "{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
               "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
               "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
               "content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + "
               "' ' + eos_token }}{% endif %}{% endfor %}", "<s>", "</s>"),
    # meta-llama/Meta-Llama-3-8B-Instruct
    "llama3": ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
               "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
               "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
               "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
               "<|end_header_id|>\n\n' }}{% endif %}", "<|begin_of_text|>", "<|eot_id|>"),
    # mistralai/Mistral-7B-Instruct-v0.2
    "mistral": ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0)"
                " %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
                "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
                "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
                "<s>", "</s>"),
    # HuggingFaceH4/zephyr-7b-beta and TinyLlama/TinyLlama-1.1B-Chat-v1.0
    "zephyr": ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] "
               "+ eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + "
               "eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + "
               "eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n"
               "{% endif %}\n{% endfor %}", "<s>", "</s>"),
    # google/gemma-7b-it
    "gemma": ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
              "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
              "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
              "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = "
              "message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
              "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
              "<bos>", "<eos>"),
    # microsoft/Phi-3-mini-4k-instruct
    "phi3": ("{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
             "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
             "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
             "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}"
             "{{ eos_token }}{% endif %}", "<s>", "<|endoftext|>"),
}
CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "You are a helpful assistant"}, {"role": "user", "content": "Hello"},
     {"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "Who are you"}],
    [{"role": "user", "content": "  Spaces around  "}, {"role": "assistant", "content": "   I am an assistant   "},
     {"role": "user", "content": "Another question\n"}],
    [{"role": "system", "content": "Be brief.\u3000"}, {"role": "user", "content": "caf\u00e9 \U0001F600\n\n"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "An empty system message"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "assistant", "content": "I speak first"}],
]
# The conversation a chat request sends in the served-model tests, and the
# template its fixture model is served with (its tokenizer has </s>).
CHAT_MODEL, CHAT_MODEL_TEMPLATE = "llama-mqa-tied", "zephyr"
CHAT_REQUEST = [{"role": "system", "content": "You are a fortune teller."},
                {"role": "user", "content": "What does the future hold?"}]


def chat_expectations(out):
    """What apply_chat_template renders for every family and conversation
    (or the error it raises), the ids it gives on a fixture tokenizer, and a
    fixture model's greedy answer to a chat request."""
    rows = []
    for name, (source, bos, eos) in CHAT_TEMPLATES.items():
        tok = PreTrainedTokenizerFast.from_pretrained(os.path.join(out, "tokenizers", "llama2"))
        tok.bos_token, tok.eos_token, tok.chat_template = bos, eos, source
        for conversation in CONVERSATIONS:
            for generation_prompt in (True, False):
                row = {"template": name, "messages": conversation, "add_generation_prompt": generation_prompt}
                try:
                    row["text"] = tok.apply_chat_template(conversation, tokenize=False,
                                                          add_generation_prompt=generation_prompt)
                    row["ids"] = tok(row["text"], add_special_tokens=False).input_ids
                except Exception as e:  # the template's raise_exception
                    row["error"] = str(e)
                rows.append(row)
    d = os.path.join(out, CHAT_MODEL)
    tok = PreTrainedTokenizerFast.from_pretrained(d)
    tok.chat_template = CHAT_TEMPLATES[CHAT_MODEL_TEMPLATE][0]
    ids = tok.apply_chat_template(CHAT_REQUEST, tokenize=True, add_generation_prompt=True, return_dict=True,
                                  return_tensors="pt")["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    with torch.no_grad():
        gen = model.generate(ids, do_sample=False, max_new_tokens=12, pad_token_id=model.config.eos_token_id)
    answer = gen[0, ids.shape[1]:].tolist()
    served = {"model": CHAT_MODEL, "template": CHAT_MODEL_TEMPLATE, "messages": CHAT_REQUEST,
              "prompt_ids": ids[0].tolist(), "greedy_ids": answer,
              "greedy_text": tok.decode([t for t in answer if t != model.config.eos_token_id],
                                        skip_special_tokens=True)}
    os.makedirs(os.path.join(out, "chat"), exist_ok=True)
    with open(os.path.join(out, "chat", "expected.json"), "w") as f:
        json.dump({"sources": {k: v[0] for k, v in CHAT_TEMPLATES.items()},
                   "tokens": {k: {"bos": v[1] or "", "eos": v[2]} for k, v in CHAT_TEMPLATES.items()},
                   "renders": rows, "served": served},
                  f, indent=1, ensure_ascii=False)


def make_config(model_type, vocab_size, kwargs, tokenizer):
    kwargs = dict(COMMON, **kwargs)
    dtype = kwargs.pop("dtype", "float32")
    kwargs.pop("model_type")
    ids = {k: tokenizer.convert_tokens_to_ids(getattr(tokenizer, k.replace("_id", "")))
           for k in ("bos_token_id", "eos_token_id", "pad_token_id")
           if getattr(tokenizer, k.replace("_id", ""), None) is not None}
    if "text_config" in kwargs:  # a multimodal model: the vocabulary is its text model's
        kwargs["text_config"] = dict(kwargs["text_config"], vocab_size=vocab_size, **ids)
        return transformers.AutoConfig.for_model(model_type, **kwargs), getattr(torch, dtype)
    config = transformers.AutoConfig.for_model(model_type, vocab_size=vocab_size, **ids, **kwargs)
    return config, getattr(torch, dtype)


def save_tokenizer(name, out):
    tok, specials, *files = TOKENIZERS[name]()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **specials)
    fast.save_pretrained(out)
    for path, data in (files[0] if files else {}).items():
        with open(os.path.join(out, path), "wb") as fh:
            fh.write(data)
    return PreTrainedTokenizerFast.from_pretrained(out)


def token_expectations(tok_dir):
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    edge = []
    for text in EDGE_CASES:
        ids = tok.encode(text).ids
        edge.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)})
    per_file = {}
    for name, texts in fortunes():
        crc, count = 0, 0
        for text in texts:  # each fortune on its own, as a user would tokenize it
            ids = tok.encode(text).ids
            count += len(ids)
            crc = zlib.crc32((",".join(map(str, ids)) + ";").encode(), crc)
        per_file[name] = {"fortunes": len(texts), "tokens": count, "crc32": crc}
    return {"edge_cases": edge, "fortunes": per_file}


@torch.no_grad()
def causal_expectations(d, tok, dtype):
    ids = tok(SCORE_TEXT, return_tensors="pt").input_ids
    out = {"score_text": SCORE_TEXT, "ids": ids[0].tolist()}
    # Loaded from the folder, as a user loads it: a model cast in memory
    # would keep buffers (rotary frequencies) rounded to its first dtype.
    for label, to_dtype in (("f32", torch.float32), ("native", dtype)):
        model = AutoModelForCausalLM.from_pretrained(d, dtype=to_dtype).eval()
        logits = model(ids).logits.float()
        lp = torch.log_softmax(logits[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
        out[f"logprobs_{label}"] = [None] + lp.tolist()
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    # One training step's loss and gradients (as a norm and a sum per
    # parameter: invariant to GPT-2's transposed Conv1D layout).
    with torch.enable_grad():
        # Framed as a training step frames a text: inputs ids[:-1], targets
        # ids[1:] (the same loss as labels=ids, but a mixture's routers, and
        # so its load-balancing loss, see the inputs alone).
        step = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(step.logits[0].float(), ids[0, 1:])
        if getattr(step, "aux_loss", None) is not None:
            loss = loss + model.config.router_aux_loss_coef * step.aux_loss
        loss.backward()
    out["train_loss"] = loss.item()
    out["grads"] = {}
    for name, p in model.named_parameters():
        if p.grad is None:  # (a multimodal model's vision tower: text never reaches it)
            continue
        # Named as the file names them (Gemma 3's multimodal models hold their text model as language_model.model.*).
        name = name.replace("model.language_model.", "language_model.model.")
        if name == "lm_head.weight" and isinstance(model, transformers.Gemma3ForConditionalGeneration):
            name = "language_model.lm_head.weight"
        # transformers 5 holds a mixture's experts fused ([experts, 2 x intermediate, hidden]
        # and [experts, hidden, intermediate]); each expert's projections get their own row.
        parts = {name: p.grad}
        if name.endswith("experts.gate_up_proj"):
            half = p.shape[1] // 2
            parts = {f"{name[:-12]}{e}.{proj}.weight": p.grad[e, rows]
                     for e in range(p.shape[0]) for proj, rows in (("gate_proj", slice(0, half)),
                                                                   ("up_proj", slice(half, None)))}
        elif name.endswith("experts.down_proj"):
            parts = {f"{name[:-9]}{e}.down_proj.weight": p.grad[e] for e in range(p.shape[0])}
        for part, grad in parts.items():
            out["grads"][part] = {"norm": grad.norm().item(), "sum": grad.sum().item()}
    model.zero_grad()
    prompt = tok(PROMPT, return_tensors="pt").input_ids
    eos = model.config.get_text_config().eos_token_id  # (a multimodal model's is its text model's)
    gen = model.generate(prompt, do_sample=False, max_new_tokens=16, pad_token_id=eos)
    greedy = gen[0, prompt.shape[1]:].tolist()
    text = tok.decode([t for t in greedy if t != eos], skip_special_tokens=True)
    out.update(prompt=PROMPT, prompt_ids=prompt[0].tolist(), greedy_ids=greedy, greedy_text=PROMPT + text)
    return out


@torch.no_grad()
def classifier_expectations(d, tok, dtype):
    model = AutoModelForSequenceClassification.from_pretrained(d, dtype=torch.float32).eval()
    rows = []
    for text in CLASSIFY_TEXTS:
        enc = tok(text, return_tensors="pt")
        probs = torch.softmax(model(**enc).logits[0].float(), -1)
        rows.append({"text": text, "ids": enc.input_ids[0].tolist(), "probs": probs.tolist()})
    return {"labels": [model.config.id2label[i] for i in range(model.config.num_labels)], "texts": rows}


def make_model(out, name, tok_name, kwargs, auto, expectations):
    d = os.path.join(out, name)
    tok = save_tokenizer(tok_name, d)
    config, dtype = make_config(kwargs["model_type"], len(tok), kwargs, tok)
    torch.manual_seed(sum(map(ord, name)))
    model = auto.from_config(config).to(dtype).eval()
    model.save_pretrained(d)
    if auto is AutoModelForCausalLM:
        model.generation_config.save_pretrained(d)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expectations(d, tok, dtype), f, indent=1, ensure_ascii=False)


def make_cross_encoder(out, name, tok_name, kwargs):
    """A reranker's folder and what sentence-transformers' CrossEncoder.predict gives for the query and documents
    (the sigmoid of the one logit, its default), with each pair's ids and token types as the tokenizer joins them."""
    from sentence_transformers import CrossEncoder
    d = os.path.join(out, name)
    tok = save_tokenizer(tok_name, d)
    # As the hub's tokenizers say: 512 tokens for 512 (514 for RoBERTa's offset) positions, and BERT's token types.
    with open(os.path.join(d, "tokenizer_config.json")) as f:
        tc = json.load(f)
    tc["model_max_length"] = 64
    if kwargs["model_type"] == "bert":
        tc["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)
    tok = PreTrainedTokenizerFast.from_pretrained(d)
    config, _ = make_config(kwargs["model_type"], len(tok), kwargs, tok)
    torch.manual_seed(sum(map(ord, name)))
    AutoModelForSequenceClassification.from_config(config).eval().save_pretrained(d)
    ce = CrossEncoder(d, device="cpu")
    pairs = [(RERANK_QUERY, doc) for doc in RERANK_DOCUMENTS]
    scores = ce.predict(pairs, batch_size=2)
    # As a batch of pairs, as CrossEncoder tokenizes them (a lone call reads an empty second text as none).
    batch = tok([q for q, _ in pairs], [doc for _, doc in pairs], truncation="longest_first", max_length=ce.max_length)
    encoded = [{k: batch[k][i] for k in batch} for i in range(len(pairs))]
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"query": RERANK_QUERY, "documents": RERANK_DOCUMENTS, "max_length": ce.max_length,
                   "ids": [e["input_ids"] for e in encoded],
                   "token_type_ids": [e.get("token_type_ids", [0] * len(e["input_ids"])) for e in encoded],
                   "scores": [float(s) for s in scores]}, f, indent=1, ensure_ascii=False)


def causal_model_with_tokens(out, name, tok_name, kwargs, special, plain=()):
    """A causal LM's folder whose tokenizer has these special and plain tokens added: (folder, tokenizer, model)."""
    d = os.path.join(out, name)
    tok = save_tokenizer(tok_name, d)
    tok.add_special_tokens({"additional_special_tokens": list(special)})
    if plain:
        tok.add_tokens(list(plain))
    tok.save_pretrained(d)
    tok = PreTrainedTokenizerFast.from_pretrained(d)
    config, _ = make_config(kwargs["model_type"], len(tok), kwargs, tok)
    torch.manual_seed(sum(map(ord, name)))
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(d)
    return d, tok, model


@torch.no_grad()
def make_fim_model(out, name, tok_name, kwargs):
    """A code model with fill-in-the-middle marks, and an /infill request for it: its prompt as llama-server's
    format_prompt_infill builds it (written out here from its source: other files' chunks, bos, the prefix's last
    1,536 tokens, the prompt, the suffix's first 510 less the prompt's, the marks), and transformers' greedy
    continuation of that prompt. The prefix and suffix are long enough to be cut."""
    d, tok, model = causal_model_with_tokens(out, name, tok_name, kwargs, FIM_MARKS)
    texts = all_fortune_texts()
    prefix, suffix = " ".join(texts[:60]), " ".join(texts[60:90])
    extra = [{"text": texts[100], "filename": "a.py"}, {"text": texts[101], "filename": "b/c.py"}]
    request = {"input_prefix": prefix, "input_suffix": suffix, "input_extra": extra, "prompt": "    return",
               "n_predict": 8, "temperature": 0}
    enc = lambda t: tok.encode(t, add_special_tokens=False)
    pre, suf, mid, rep, sep = (tok.convert_tokens_to_ids(m) for m in FIM_MARKS)
    extra_ids = [rep] + enc("myproject\n")
    for chunk in extra:
        extra_ids += [sep] + enc(chunk["filename"] + "\n") + enc(chunk["text"])
    extra_ids += [sep] + enc("filename\n")
    batch, n_ctx = 2048, kwargs["max_position_embeddings"]
    prefix_ids, suffix_ids, prompt_ids = enc(prefix), enc(suffix), enc(request["prompt"])
    prefix_take = min(len(prefix_ids), 3 * (batch // 4))
    suffix_take = min(len(suffix_ids), max(0, batch // 4 - (2 + len(prompt_ids))))
    extra_take = min(max(0, n_ctx - batch - 2 * request["n_predict"]), len(extra_ids))
    assert len(prefix_ids) > prefix_take and len(suffix_ids) > suffix_take, "the prefix and suffix must be cut"
    ids = (extra_ids[len(extra_ids) - extra_take:] + [tok.bos_token_id, pre] + prefix_ids[len(prefix_ids) - prefix_take:]
           + prompt_ids + [suf] + suffix_ids[:suffix_take] + [mid])
    out_ids = model.generate(torch.tensor([ids]), max_new_tokens=request["n_predict"], do_sample=False,
                             pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"request": request, "prompt_ids": ids, "greedy_ids": out_ids,
                   "greedy_text": tok.decode(out_ids, skip_special_tokens=True)}, f, indent=1, ensure_ascii=False)


@torch.no_grad()
def make_prompt_reranker(out, name, tok_name, kwargs):
    """Qwen3-Reranker's kind, and its model card's scores for the query and documents: each pair in its prompt
    (prefix, instruction, query, document, suffix: tokenized in three parts, as the card does), and the
    probability of "yes" against "no" at the last token."""
    d, tok, model = causal_model_with_tokens(out, name, tok_name, kwargs, ["<|im_start|>", "<|im_end|>"], ["yes", "no"])
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write("# Qwen3-Reranker\n\nA random-weight test model of Qwen3-Reranker's kind.\n")
    prefix = tok.encode(QWEN3_RERANK_PREFIX, add_special_tokens=False)
    suffix = tok.encode(QWEN3_RERANK_SUFFIX, add_special_tokens=False)
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    ids, scores = [], []
    for doc in RERANK_DOCUMENTS:
        body = f"<Instruct>: {QWEN3_RERANK_INSTRUCTION}\n<Query>: {RERANK_QUERY}\n<Document>: {doc}"
        row = prefix + tok.encode(body, add_special_tokens=False) + suffix
        # llama-server tokenizes the whole prompt at once: the same ids here
        assert row == tok.encode(QWEN3_RERANK_PREFIX + body + QWEN3_RERANK_SUFFIX, add_special_tokens=False)
        last = model(torch.tensor([row])).logits[0, -1]
        scores.append(torch.softmax(torch.stack([last[no], last[yes]]), -1)[1].item())
        ids.append(row)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"query": RERANK_QUERY, "documents": RERANK_DOCUMENTS, "ids": ids, "scores": scores}, f, indent=1,
                  ensure_ascii=False)


def make_embedder(out, name, tok_name, kwargs, pooling, normalize, max_seq_length, layout, extras=None):
    """extras: dense, (out_features, bias, "tanh" or None for the identity) per Dense module after pooling; prompts,
    config_sentence_transformers.json's (expected.json adds each text's embedding after the first prompt)."""
    from sentence_transformers import SentenceTransformer, models
    extras = extras or {}
    d, raw = os.path.join(out, name), os.path.join(out, name + ".encoder")
    tok = save_tokenizer(tok_name, raw)
    config, _ = make_config(kwargs["model_type"], len(tok), kwargs, tok)
    torch.manual_seed(sum(map(ord, name)))
    transformers.AutoModel.from_config(config).save_pretrained(raw)
    word = models.Transformer(raw, max_seq_length=max_seq_length)
    modules = [word, models.Pooling(word.get_embedding_dimension(), pooling_mode=pooling)]
    width = word.get_embedding_dimension()
    for features, bias, activation in extras.get("dense", []):
        modules.append(models.Dense(width, features, bias=bias,
                                    activation_function=torch.nn.Tanh() if activation == "tanh" else None))
        torch.nn.init.normal_(modules[-1].linear.weight, std=0.3)  # larger than its default: the projection shows
        width = features
    SentenceTransformer(modules=modules + ([models.Normalize()] if normalize else []), device="cpu",
                        prompts=extras.get("prompts")).save(d)
    if os.path.exists(os.path.join(raw, "sentencepiece.bpe.model")):
        shutil.copy(os.path.join(raw, "sentencepiece.bpe.model"), d)
    shutil.rmtree(raw)
    os.remove(os.path.join(d, "README.md"))
    if layout == "hub":
        with open(os.path.join(d, "modules.json")) as f:
            mods = json.load(f)
        for m in mods:
            m["type"] = "sentence_transformers.models." + m["type"].rsplit(".", 1)[1]
        flags = {f"pooling_mode_{k}": pooling == v for k, v in
                 (("cls_token", "cls"), ("mean_tokens", "mean"), ("max_tokens", "max"),
                  ("mean_sqrt_len_tokens", "mean_sqrt_len_tokens"))}
        rewrites = {"modules.json": mods,
                    "1_Pooling/config.json": dict(word_embedding_dimension=word.get_embedding_dimension(), **flags),
                    "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False}}
        for path, content in rewrites.items():
            with open(os.path.join(d, path), "w") as f:
                json.dump(content, f, indent=2)
        with open(os.path.join(d, "tokenizer_config.json")) as f:
            tc = json.load(f)
        tc["model_max_length"] = 512  # the hub's: sentence_bert_config.json's max_seq_length cuts first
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(tc, f, indent=2)
    st = SentenceTransformer(d, device="cpu")  # read back, as a user loads it
    with torch.no_grad():
        embeddings = st.encode(EMBED_TEXTS, batch_size=2, convert_to_numpy=True)
    ids = [st.tokenize([t])["input_ids"][0].tolist() for t in EMBED_TEXTS]
    expected = {"texts": EMBED_TEXTS, "ids": ids, "embeddings": embeddings.tolist(), "pooling": pooling,
                "normalize": normalize, "max_seq_length": st.max_seq_length}
    if extras.get("prompts"):
        prompt_name = sorted(extras["prompts"])[0]
        with torch.no_grad():
            expected["prompted"] = {"prompt_name": prompt_name, "embeddings": st.encode(
                EMBED_TEXTS, prompt_name=prompt_name, batch_size=2, convert_to_numpy=True).tolist()}
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)


# The speed models' shapes (Llama architecture, random weights): SmolLM-135M's
# and TinyLlama-1.1B's, as their config.json files give them.
SPEED_SHAPES = {
    # Not for speed: a Llama small enough to commit as GGUF (tests/hf/fixtures/gguf-tiny), GQA with 4 query heads:
    # convert_hf_to_gguf.py --outtype f32 and f16, then llama-quantize's Q8_0, Q4_0, Q4_K_M and IQ4_NL of the F32 file;
    # tests/hf/fixtures/gguf-tiny-split: `llama-gguf-split --split --split-max-tensors 8` of the Q4_K_M file.
    "gguf-tiny": dict(vocab_size=1000, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    # Every dimension a multiple of 256, so llama-quantize's K-quants apply to every matrix (gguf-tiny's fall back
    # to Q5_0/Q8_0): the K-quant quality and speed checks of docs/PERFORMANCE.md.
    "kquant-mini": dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                        num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False),
    # Mixtral's architecture (8 experts, 2 per token) at a size a 2-core run
    # measures in minutes: 8 layers 512 wide, experts 1,024 wide (140M parameters, 64M of them read per token).
    "mixtral-mini": dict(model_type="mixtral", vocab_size=32000, hidden_size=512, intermediate_size=1024,
                         num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, num_local_experts=8,
                         num_experts_per_tok=2, tie_word_embeddings=False),
    "smollm-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                        num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True),
    "tinyllama-1.1b": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4, tie_word_embeddings=False),
}


# One fine-tuning batch (tests/test_sft.cpp): prompt/completion and text
# lines, encoded as TRL's SFTTrainer does (the prompt with the tokenizer's
# special tokens, the completion without, then eos; text likewise).
FINETUNE_LINES = [
    {"prompt": "Q: What is the best way to predict the future?\nA:", "completion": " Invent it."},
    {"prompt": "Fortune: ", "completion": "You will be hungry again in one hour."},
    {"text": "Whenever you find that you are on the side of the majority, it is time to reform."},
    {"prompt": "A proverb:\n", "completion": "Still waters run deep, and so does the tax code."},
]
FINETUNE_LR = 1e-3
# The LoRA cases: the adapters start random (init_lora_weights=False), so
# the first step's gradients reach A and B alike.
FINETUNE_LORA = {
    "lora-qv": dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    "lora-all": dict(r=4, lora_alpha=16, target_modules="all-linear"),
}


def kiln_lr(step, total, max_lr):
    """Kiln's schedule for kiln train sft: no warmup, cosine to a tenth."""
    import math
    min_lr = 0.1 * max_lr
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * step / total))


def note_unresolved(model, unresolved):
    """Adds the elements whose gradient is not zero but below f32's
    resolution of its sum (|g| < 1e-7, against a median of about 4e-3) to
    `unresolved` (name -> flat indices): their sign is rounding noise, and
    AdamW's early steps move them by up to lr either way (attention's key
    biases are all such: softmax ignores a shift that is the same for every key)."""
    for name, p in model.named_parameters():
        if p.requires_grad:
            g = p.grad.flatten().abs()
            small = ((g > 0) & (g < 1e-7)).nonzero().flatten().tolist()
            if small:
                key = name.replace(".default.", ".")
                unresolved[key] = sorted(set(unresolved.get(key, [])) | set(small))


def finetune_batch(tok, eos):
    ids, labels = [], []
    for line in FINETUNE_LINES:
        if "text" in line:
            i = tok(line["text"]).input_ids + [eos]
            learn = [0] + [1] * (len(i) - 1)
        else:
            p = tok(line["prompt"]).input_ids
            c = tok(line["completion"], add_special_tokens=False).input_ids + [eos]
            i, learn = p + c, [0] * len(p) + [1] * len(c)
        ids.append(i)
        labels.append([t if l else -100 for t, l in zip(i, learn)])
    T = max(map(len, ids))
    x = torch.tensor([i + [eos] * (T - len(i)) for i in ids])
    y = torch.tensor([l + [-100] * (T - len(l)) for l in labels])
    return ids, labels, x, y


def finetune_expectations(out, base_name="llama-gqa", steps=2):
    """Two steps of full and LoRA fine-tuning with transformers (+ peft), as
    kiln train sft runs them: AdamW (transformers' Trainer defaults: no
    weight decay), gradients clipped to norm 1, Kiln's learning rate schedule."""
    import peft
    from safetensors.torch import save_file
    base = os.path.join(out, base_name)
    d = os.path.join(out, "finetune")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tok = PreTrainedTokenizerFast.from_pretrained(base)
    config = transformers.AutoConfig.from_pretrained(base)
    ids, labels, x, y = finetune_batch(tok, config.eos_token_id)
    with open(os.path.join(d, "train.jsonl"), "w") as f:
        for line in FINETUNE_LINES:
            f.write(json.dumps(line) + "\n")
    expected = {"base": base_name, "lr": FINETUNE_LR, "steps": steps, "batch_size": len(FINETUNE_LINES),
                "ids": ids, "labels": labels, "cases": {}}
    for case in ["full"] + list(FINETUNE_LORA):
        torch.manual_seed(sum(map(ord, case)))
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        if case != "full":
            lora = peft.LoraConfig(lora_dropout=0.0, init_lora_weights=False, **FINETUNE_LORA[case])
            model = peft.get_peft_model(model, lora)
            model.save_pretrained(os.path.join(d, case + "-init"))
            os.remove(os.path.join(d, case + "-init", "README.md"))  # peft's model card
        model.train()
        trainable = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(trainable, lr=FINETUNE_LR, weight_decay=0.0)
        losses = []
        # (The first such element's f32 gradient is -4.1e-9, its f64 one +3.9e-9.)
        unresolved = {}
        for step in range(steps):
            for g in opt.param_groups:
                g["lr"] = kiln_lr(step, steps, FINETUNE_LR)
            loss = model(input_ids=x, labels=y).loss
            loss.backward()
            note_unresolved(model, unresolved)
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        if case == "full":
            after = {k: v.contiguous() for k, v in model.state_dict().items()}
        else:
            after = {k: v.contiguous() for k, v in peft.get_peft_model_state_dict(model).items()}
        save_file(after, os.path.join(d, case + "-after.safetensors"))
        expected["cases"][case] = {"losses": losses, "trainable": sum(p.numel() for p in trainable),
                                   "unresolved": unresolved}
    expected["distill"] = distill_expectations(out, x, y)
    expected["classify"] = classify_step_expectations(out, d, steps)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


CLASSIFY_LINES = [
    {"text": "What a wonderful, happy day!", "label": "positive"},
    {"text": "This is awful.", "label": "negative"},
    {"text": "The meeting is at noon.", "label": "neutral"},
    {"text": "I love it, truly the best fortune ever written.", "label": "positive"},
]


def classify_step_expectations(out, d, steps, base_name="bert"):
    """Two steps of kiln train classify on the BERT fixture as transformers
    takes them: its own head (the data's labels are the model's), dropout off
    (Kiln's encoder has none), the same AdamW, clipping and schedule."""
    from safetensors.torch import save_file
    base = os.path.join(out, base_name)
    with open(os.path.join(d, "classify.jsonl"), "w") as f:
        for line in CLASSIFY_LINES:
            f.write(json.dumps(line) + "\n")
    tok = PreTrainedTokenizerFast.from_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(base, dtype=torch.float32, hidden_dropout_prob=0.0,
                                                               attention_probs_dropout_prob=0.0)
    label_id = {v: int(k) for k, v in model.config.id2label.items()}
    enc = tok([l["text"] for l in CLASSIFY_LINES], padding=True, return_tensors="pt")
    labels = torch.tensor([label_id[l["label"]] for l in CLASSIFY_LINES])
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=FINETUNE_LR, weight_decay=0.0)
    losses, unresolved = [], {}
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = kiln_lr(step, steps, FINETUNE_LR)
        loss = model(**enc, labels=labels).loss
        loss.backward()
        note_unresolved(model, unresolved)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(d, "classify-after.safetensors"))
    return {"base": base_name, "losses": losses, "batch_size": len(CLASSIFY_LINES), "unresolved": unresolved,
            "trainable": sum(p.numel() for p in model.parameters())}


@torch.no_grad()
def distill_expectations(out, x, y, student="llama-gqa", teacher="qwen2", temperature=2.0, alpha=0.5):
    """The distillation loss of Hinton et al. as transformers' examples
    compute it, over the positions with a target: alpha T^2 KL(teacher_T ||
    student_T), KL averaged over them, plus (1 - alpha) cross-entropy. The
    two fixtures share the llama3 tokenizer."""
    import torch.nn.functional as F
    s = AutoModelForCausalLM.from_pretrained(os.path.join(out, student), dtype=torch.float32)(x).logits
    t = AutoModelForCausalLM.from_pretrained(os.path.join(out, teacher), dtype=torch.float32)(x).logits
    labels = y[:, 1:]
    mask = labels != -100
    s, t = s[:, :-1][mask], t[:, :-1][mask]
    kl = F.kl_div(F.log_softmax(s / temperature, -1), F.log_softmax(t / temperature, -1), log_target=True,
                  reduction="batchmean")
    hard = F.cross_entropy(s, labels[mask])
    return {"student": student, "teacher": teacher, "temperature": temperature, "alpha": alpha, "kl": kl.item(),
            "hard": hard.item(), "loss": (alpha * temperature ** 2 * kl + (1 - alpha) * hard).item()}


def make_speed_model(d, shape="smollm-135m"):
    """A model of one of SPEED_SHAPES (a Llama unless it says), random f32 weights; its tokenizer.json
    for Kiln and transformers, and a SentencePiece tokenizer.model for
    llama.cpp's converter (speed does not depend on it)."""
    tok = save_tokenizer("llama2", d)
    dims = dict(SPEED_SHAPES[shape])
    config = transformers.AutoConfig.for_model(dims.pop("model_type", "llama"), **dims, max_position_embeddings=2048,
                                               rope_theta=10000.0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(d)
    del tok
    # llama.cpp's converter reads a Llama folder's SentencePiece tokenizer.model.
    import sentencepiece
    files = [os.path.join(FORTUNES, f) for f, _ in fortunes()]
    sentencepiece.SentencePieceTrainer.train(input=",".join(files), model_prefix=os.path.join(d, "tokenizer"),
                                             vocab_size=1000, model_type="bpe", byte_fallback=True, minloglevel=2)


def make_sentiment_model(d):
    """DistilBERT-base's shape (6 layers, 768 wide, 12 heads, a 3,072-wide
    MLP, 30,522 tokens, two labels), random weights: the sentiment model of
    bench/serve/sentiment_bench.sh. Its tokenizer is the WordPiece fixture's
    (speed does not depend on it)."""
    tok = save_tokenizer("bert", d)
    config = transformers.DistilBertConfig(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072,
                                           max_position_embeddings=512, id2label={0: "NEGATIVE", 1: "POSITIVE"},
                                           pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--speed", metavar="DIR", help="make only a speed model (--shape), in DIR")
    ap.add_argument("--shape", choices=sorted(SPEED_SHAPES), default="smollm-135m", help="the --speed model's shape")
    ap.add_argument("--chat", action="store_true", help="remake only OUT/chat (the chat templates' answers)")
    ap.add_argument("--sentiment", metavar="DIR", help="make only the DistilBERT-shaped classifier, in DIR")
    ap.add_argument("--finetune", action="store_true", help="remake only OUT/finetune (fine-tuning steps' answers)")
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    choices=sorted(CAUSAL) + sorted(CLASSIFIERS) + sorted(EMBEDDERS) + sorted(CROSS_ENCODERS) +
                    sorted(PROMPT_RERANKERS) + sorted(FIM_MODELS),
                    help="remake only these models' folders (the others stay as they are)")
    a = ap.parse_args()
    if a.only:
        for name in a.only:
            shutil.rmtree(os.path.join(a.out, name), ignore_errors=True)
            if name in CAUSAL:
                make_model(a.out, name, *CAUSAL[name], AutoModelForCausalLM, causal_expectations)
            elif name in EMBEDDERS:
                make_embedder(a.out, name, *EMBEDDERS[name])
            elif name in CROSS_ENCODERS:
                make_cross_encoder(a.out, name, *CROSS_ENCODERS[name])
            elif name in PROMPT_RERANKERS:
                make_prompt_reranker(a.out, name, *PROMPT_RERANKERS[name])
            elif name in FIM_MODELS:
                make_fim_model(a.out, name, *FIM_MODELS[name])
            else:
                make_model(a.out, name, *CLASSIFIERS[name], AutoModelForSequenceClassification,
                           classifier_expectations)
        return
    if a.speed:
        make_speed_model(a.speed, a.shape)
        return
    if a.chat:
        chat_expectations(a.out)
        return
    if a.sentiment:
        make_sentiment_model(a.sentiment)
        return
    if a.finetune:
        finetune_expectations(a.out)
        return
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    for name in TOKENIZERS:
        d = os.path.join(a.out, "tokenizers", name)
        save_tokenizer(name, d)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(token_expectations(d), f, indent=1, ensure_ascii=False)
    for name, (tok_name, kwargs) in CAUSAL.items():
        make_model(a.out, name, tok_name, kwargs, AutoModelForCausalLM, causal_expectations)
    for name, (tok_name, kwargs) in CLASSIFIERS.items():
        make_model(a.out, name, tok_name, kwargs, AutoModelForSequenceClassification, classifier_expectations)
    for name, spec in EMBEDDERS.items():
        make_embedder(a.out, name, *spec)
    for name, spec in CROSS_ENCODERS.items():
        make_cross_encoder(a.out, name, *spec)
    for name, spec in PROMPT_RERANKERS.items():
        make_prompt_reranker(a.out, name, *spec)
    for name, spec in FIM_MODELS.items():
        make_fim_model(a.out, name, *spec)
    chat_expectations(a.out)
    finetune_expectations(a.out)
    with open(os.path.join(a.out, "VERSIONS"), "w") as f:
        f.write(f"transformers {transformers.__version__}\ntorch {torch.__version__}\n")


if __name__ == "__main__":
    main()
