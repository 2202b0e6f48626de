#!/usr/bin/env python3
"""A Qwen2.5-Instruct-style folder as transformers 5 saves it, for the
end-to-end chat test (tests/cli/hf_qwen2_chat.sh): Qwen2's real vocabulary
(llama.cpp's ggml-vocab-qwen2, converted by transformers, with the NFC
normalizer and empty BPE prefix/suffix Qwen's own files carry), Qwen2.5's
real chat template as chat_template.jinja, eos ids as Qwen2.5-Instruct's
generation_config.json lists them, and a tiny Qwen2 model with random
weights. expected.json holds transformers' greedy reply to a conversation.

    $(bench/torch2_venv.sh) tests/hf/make_qwen2_folder.py VOCABS_DIR OUT
"""
import json
import os
import sys

import torch
from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
MESSAGES = [{"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Name a colour. Café? 日本"}]


def main():
    vocabs, out = sys.argv[1], sys.argv[2]
    if os.path.exists(os.path.join(out, "expected.json")):
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(vocabs, "qwen2-nfc", "tokenizer.json"), encoding="utf-8") as f:
        tokenizer_json = json.load(f)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json, f, ensure_ascii=False)
    template = open(os.path.join(HERE, "fixtures", "chat_templates", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja"),
                    encoding="utf-8").read()
    tok = AutoTokenizer.from_pretrained(out, chat_template=template, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.save_pretrained(out)  # transformers 5: tokenizer_config.json and chat_template.jinja
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, initializer_range=0.5, eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    model = Qwen2ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")],
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    model.save_pretrained(out)
    ids = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    prompt = ids["input_ids"]
    with torch.no_grad():
        greedy = model.generate(**ids, max_new_tokens=10, do_sample=False)[0][prompt.shape[1]:].tolist()
    expected = {"messages": MESSAGES, "prompt_ids": prompt[0].tolist(), "greedy_ids": greedy,
                "greedy_text": tok.decode(greedy, skip_special_tokens=True),
                "prompt": tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)}
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)
    print(f"{out}: {sum(p.numel() for p in model.parameters())} parameters", file=sys.stderr)


if __name__ == "__main__":
    main()
