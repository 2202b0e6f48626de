"""One small GGUF file per architecture Kiln reads from GGUF, each made as a
llama.cpp user's file is made: a transformers model (random weights, in the
PyTorch 2 environment: bench/torch2_venv.sh) converted by llama.cpp's own
convert_hf_to_gguf.py (tests/hf/convert_fixture_to_gguf.py), with the
log-probabilities transformers gives on the file's values kept beside it
(F16, as the converter's --outtype f16 writes it: half the size of F32). The
shapes are make_fixtures.py's, changed only where llama.cpp's format cannot
say what the folder says (it fixes Gemma 3's sliding pattern at 6, SmolLM3's
unrotated layers at every fourth, the attention scale at 1/sqrt(head_dim),
ties Gemma's output to its embedding, and has no dense layers among
Qwen3-MoE's experts).
    $(bench/torch2_venv.sh) tests/hf/make_gguf_arch_fixtures.py "$(scripts/llama_cpp_source.sh)"
        # -> tests/hf/fixtures/gguf-archs/{NAME.gguf, expected.json}
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_fixtures as mf  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "gguf-archs")

# name -> (make_fixtures.CAUSAL's entry, what changes, what leaves).
ARCHS = {
    "llama3-rope": ("llama-gqa", {}, []),  # Llama 3.1's RoPE scaling: rope_freqs.weight
    "qwen2": ("qwen2", {}, []),  # q, k and v biases
    "gemma": ("gemma", {}, []),
    "gemma2": ("gemma2", dict(query_pre_attn_scalar=10, tie_word_embeddings=True), []),  # the converter drops lm_head
    "gemma3": ("gemma3", dict(num_hidden_layers=6, query_pre_attn_scalar=14), ["layer_types"]),
    "phi3": ("phi3", {}, []),  # fused projections, partial rotary, longrope's two factor sets
    "smollm3": ("smollm3", {}, ["no_rope_layers"]),
    "granite": ("granite", {}, []),
    "olmo2": ("olmo2", {}, []),
    "mixtral": ("mixtral", {}, []),  # llama.cpp's "llama" with experts
    "qwen3moe": ("qwen3-moe", {}, ["mlp_only_layers"]),
    "olmoe": ("olmoe", {}, []),
}
# llama.cpp converts OLMo's vocabularies as byte-level BPE (GPT-2's kind), as the real ones are; make_fixtures.py
# gives these two a SentencePiece-style one.
BYTE_LEVEL = {"olmo2", "olmoe"}


@torch.no_grad()
def make(name, work, llama_cpp):
    base, changes, dropped = ARCHS[name]
    tok_name, kwargs = mf.CAUSAL[base]
    tok_name = "llama3" if name in BYTE_LEVEL else tok_name
    kwargs = {k: v for k, v in dict(kwargs, **changes).items() if k not in dropped}
    d = os.path.join(work, name)
    tok = mf.save_tokenizer(tok_name, d)
    config, _ = mf.make_config(kwargs["model_type"], len(tok), kwargs, tok)
    torch.manual_seed(sum(map(ord, name)))
    model = AutoModelForCausalLM.from_config(config).float().eval()
    model.save_pretrained(d)
    subprocess.run([sys.executable, os.path.join(HERE, "convert_fixture_to_gguf.py"), llama_cpp, "qwen2", d,
                    "--outtype", "f16", "--outfile", os.path.join(OUT, name + ".gguf")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The file holds what the converter's F16 keeps: matrices (experts too) rounded to half precision; norms,
    # biases and routers in F32. The expectation is transformers' on those same values.
    for pname, p in model.named_parameters():
        if p.dim() >= 2 and not pname.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight")):
            p.copy_(p.half().float())
    ids = tok(mf.SCORE_TEXT, return_tensors="pt").input_ids
    lp = torch.log_softmax(model(ids).logits.float()[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
    return {"from": base, "ids": ids[0].tolist(), "logprobs": lp.tolist()}


def main():
    llama_cpp = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        expected = {name: make(name, work, llama_cpp) for name in ARCHS}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


if __name__ == "__main__":
    main()
