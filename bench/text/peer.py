"""The peers of kiln_text_bench, timed the same way on one thread:
transformers' render_jinja_template and tokenizers' encode.
    peer.py template FILE TURNS REPEATS | tokenize TOKENIZER.json TEXTS.json REPEATS"""
import json
import os
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
mode, path, arg, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if mode == "template":
    from transformers.utils.chat_template_utils import render_jinja_template
    source = open(path, encoding="utf-8").read()
    turns = int(arg)
    messages = [{"role": "system", "content": "You are a helpful assistant. Answer in one paragraph."}]
    messages += [{"role": "assistant" if i % 2 else "user",
                  "content": f"Turn {i}: tell me about the weather in a city, briefly.\n"} for i in range(turns)]
    render = lambda: render_jinja_template([messages], chat_template=source, add_generation_prompt=True,
                                           bos_token="<s>", eos_token="</s>")[0][0]
    n = len(render())
    start = time.perf_counter()
    for _ in range(repeats):
        render()
    print(json.dumps({"engine": "transformers", "render_us": (time.perf_counter() - start) / repeats * 1e6, "bytes": n}))
else:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    texts = json.load(open(arg, encoding="utf-8"))
    tokens = sum(len(tok.encode(s, add_special_tokens=False).ids) for s in texts)
    start = time.perf_counter()
    for _ in range(repeats):
        for s in texts:
            tok.encode(s, add_special_tokens=False)
    s = time.perf_counter() - start
    # encode_batch: the texts in one call, without Python's cost per call (one thread: RAYON_NUM_THREADS=1).
    start = time.perf_counter()
    for _ in range(repeats):
        tok.encode_batch(texts, add_special_tokens=False)
    b = time.perf_counter() - start
    print(json.dumps({"engine": "tokenizers", "texts_per_s": len(texts) * repeats / s, "tokens_per_s": tokens * repeats / s,
                      "batch_tokens_per_s": tokens * repeats / b}))
