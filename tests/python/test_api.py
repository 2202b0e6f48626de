# kiln.train, kiln.plan and kiln.load: the command's work from Python, its
# errors as exceptions, and Ctrl-C ending a run at a step boundary.
import _thread
import json
import os
import subprocess
import threading

import numpy as np
import pytest

import kiln


def test_version_is_the_cpp_one(kiln_cli):
    out = subprocess.run([kiln_cli, "--version"], capture_output=True, text=True, check=True).stdout
    assert kiln.__version__ in out


def test_train_then_load_and_classify(tmp_path):
    run = tmp_path / "mlp"
    result = kiln.train("fashion-mlp", steps=30, seed=3, out=str(run), no_progress=True)
    assert result["steps"] == 30 and result["test_accuracy"] > 0.6
    assert os.path.isdir(result["checkpoint"])
    model = kiln.load(str(run))
    assert model.kind == "image-classifier" and model.step == 30 and len(model.labels) == 10
    images = kiln.data.FashionMNIST("test").images
    pixels = kiln.tensor(np.asarray(images[:4]).astype(np.float32)[:, None] / 255)
    probs = np.asarray(model.classify_images(pixels))
    assert probs.shape == (4, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
    with pytest.raises(ValueError, match="needs a language model"):
        model.generate("hello")


def test_a_language_model_from_a_hugging_face_folder(kiln_cli, source_dir):
    folder = os.path.join(source_dir, "tests", "hf", "fixtures", "llama-gqa")
    model = kiln.load("hf:" + folder)
    text = model.generate("The best way to predict", max_tokens=12, temperature=0)
    cli = subprocess.run([kiln_cli, "sample", "hf:" + folder, "--prompt", "The best way to predict", "--temperature",
                          "0", "--count", "1", "--max-tokens", "12"], capture_output=True, text=True, check=True).stdout
    assert cli.splitlines()[0] == ("The best way to predict" + text).splitlines()[0]
    # The penalties as `kiln sample` takes them; a value no sampler takes is an error.
    rewarded = model.generate("The best way to predict", max_tokens=12, temperature=0, repetition_penalty=0.5)
    cli = subprocess.run([kiln_cli, "sample", "hf:" + folder, "--prompt", "The best way to predict", "--temperature",
                          "0", "--count", "1", "--max-tokens", "12", "--repeat-penalty", "0.5"],
                         capture_output=True, text=True, check=True).stdout
    assert cli.splitlines()[0] == ("The best way to predict" + rewarded).splitlines()[0]
    with pytest.raises(kiln.KilnError, match="min_p"):
        model.generate("x", min_p=2.0)
    # OpenAI's logit_bias, by token id: +100 on one token makes every greedy token that one.
    forced = model.generate("The best way to predict", max_tokens=4, temperature=0, logit_bias={42: 100.0})
    once = model.generate("The best way to predict", max_tokens=1, temperature=0, logit_bias={42: 100.0})
    assert forced != model.generate("The best way to predict", max_tokens=4, temperature=0)
    assert once and forced.replace(once.strip(), "").strip() == "", (once, forced)
    with pytest.raises(kiln.KilnError, match="logit_bias names token"):
        model.generate("x", logit_bias={10**9: 1.0})
    # Its tokens, as `kiln tokenize` gives them; decode gives the text back (the special tokens' text kept).
    ids = model.encode("The best way to predict")
    cli = subprocess.run([kiln_cli, "tokenize", "hf:" + folder, "--json", "--text", "The best way to predict"],
                         capture_output=True, text=True, check=True).stdout
    assert ids == json.loads(cli.strip().splitlines()[-1])["ids"], (ids, cli)
    plain = model.encode("The best way to predict", add_special_tokens=False)
    assert len(plain) < len(ids) and model.decode(plain) == "The best way to predict"
    with pytest.raises(kiln.KilnError, match="outside the tokenizer"):
        model.decode([10**9])
    scores = model.score("The best way to predict the future")
    assert scores["logprobs"][0] is None and all(lp < 0 for lp in scores["logprobs"][1:])
    assert scores["perplexity"] > 1


def test_plan_returns_what_kiln_plan_json_prints(kiln_cli):
    plan = kiln.plan(preset="gpt2", gpu="RTX-4090", tokens="1B")
    import json
    cli = json.loads(subprocess.run([kiln_cli, "plan", "--preset", "gpt2", "--gpu", "RTX-4090", "--tokens", "1B",
                                     "--json"], capture_output=True, text=True).stdout)
    assert plan == cli and plan


def test_errors_are_the_commands(tmp_path):
    with pytest.raises(ValueError, match="--no-such-option"):
        kiln.train("fashion-mlp", no_such_option=3)
    with pytest.raises(ValueError, match="precision"):
        kiln.train("fashion-mlp", precision="fp8", out=str(tmp_path / "x"))
    with pytest.raises(kiln.KilnError, match="no checkpoint|not found|does not exist|cannot"):
        kiln.load(str(tmp_path / "nothing-here"))


def test_ctrl_c_stops_at_a_step_boundary_with_a_checkpoint(tmp_path):
    run = str(tmp_path / "mlp")
    timer = threading.Timer(1.5, _thread.interrupt_main)  # as a Ctrl-C arriving mid-run
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        kiln.train("fashion-mlp", steps=100000, out=run, no_progress=True)
    timer.cancel()
    stopped = max(int(d.split("_")[1]) for d in os.listdir(run) if d.startswith("step_"))  # epochs checkpoint too
    assert 0 < stopped < 100000
    result = kiln.train("fashion-mlp", out=run, resume=True, stop_after=2, no_progress=True)
    assert result["start_step"] == stopped and result["steps"] == stopped + 2


def test_a_text_classifier_gives_what_kiln_classify_prints(kiln_cli, source_dir):
    folder = "hf:" + os.path.join(source_dir, "tests", "hf", "fixtures", "bert")
    probs = kiln.load(folder).classify("what a lovely day")
    cli = subprocess.run([kiln_cli, "classify", folder, "--text", "what a lovely day"], capture_output=True, text=True,
                         check=True).stdout
    printed = {line.split()[0]: float(line.split()[1]) for line in cli.splitlines() if line.startswith("  ")}
    assert set(probs) == set(printed) and all(abs(probs[k] - printed[k]) < 1e-4 for k in probs)


def test_apply_chat_template_renders_as_transformers_did(source_dir):
    corpus = os.path.join(source_dir, "tests", "hf", "fixtures", "chat_templates")
    e = json.load(open(os.path.join(corpus, "expected.json"), encoding="utf-8"))
    for name, conversation in [("meta-llama-Llama-3.1-8B-Instruct.jinja", "tools"),
                               ("Qwen-Qwen3-0.6B.jinja", "reasoning")]:
        row = next(r for r in e["renders"] if r["template"] == name and r["conversation"] == conversation
                   and r["add_generation_prompt"])
        c = e["conversations"][conversation]
        source = open(os.path.join(corpus, "templates", name), encoding="utf-8").read()
        assert kiln.apply_chat_template(c["messages"], chat_template=source, tools=c["tools"], bos_token="<s>",
                                        eos_token="</s>") == row["text"]
    qwen3 = open(os.path.join(corpus, "templates", "Qwen-Qwen3-0.6B.jinja"), encoding="utf-8").read()
    hi = [{"role": "user", "content": "Hi"}]
    assert kiln.apply_chat_template(hi, chat_template=qwen3, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    with pytest.raises(kiln.KilnError, match="System role not supported"):
        gemma = open(os.path.join(corpus, "templates", "google-gemma-2-2b-it.jinja"), encoding="utf-8").read()
        kiln.apply_chat_template([{"role": "system", "content": "x"}] + hi, chat_template=gemma)


def test_model_chat_answers_as_the_server_does(source_dir):
    fixtures = os.path.join(source_dir, "tests", "hf", "fixtures")
    want = json.load(open(os.path.join(fixtures, "chat", "expected.json"), encoding="utf-8"))["served"]
    model = kiln.load("hf:" + os.path.join(fixtures, want["model"]), chat_template=want["template"])
    assert model.chat(want["messages"], max_tokens=12, temperature=0) == want["greedy_text"]


def tiny_llama_under(source_dir, folder, template):
    """The gguf-tiny fixture (a random Llama with a context long enough for a tools prompt) in `folder`
    under one of the corpus's real chat templates."""
    fixtures = os.path.join(source_dir, "tests", "hf", "fixtures")
    for name in os.listdir(os.path.join(fixtures, "gguf-tiny")):
        os.symlink(os.path.join(fixtures, "gguf-tiny", name), folder / name)
    source = os.path.join(fixtures, "chat_templates", "templates", template)
    (folder / "chat_template.jinja").write_text(open(source, encoding="utf-8").read(), encoding="utf-8")
    return kiln.load("hf:" + str(folder))


def test_model_chat_calls_tools_and_answers_in_a_schema(source_dir, tmp_path):
    # A tiny random Llama (a context long enough for the tools' system prompt) under Qwen2.5's real
    # template (Hermes tool calls): it knows nothing, so only the constraint makes its calls and answers valid.
    model = tiny_llama_under(source_dir, tmp_path, "Qwen-Qwen2.5-7B-Instruct.jinja")
    unit = ["celsius", "fahrenheit"]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
              "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": unit}},
              "required": ["city", "unit"], "additionalProperties": False}}},
             {"type": "function", "function": {"name": "get_time"}}]
    hi = [{"role": "user", "content": "Weather in Paris?"}]
    for seed in range(3):
        reply = model.chat(hi, tools=tools, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                           max_tokens=200, seed=seed, temperature=1.0)
        assert reply["finish_reason"] == "tool_calls", reply
        call = reply["tool_calls"][0]
        assert call["function"]["name"] == "get_weather" and call["id"].startswith("call_")
        arguments = json.loads(call["function"]["arguments"])
        assert set(arguments) == {"city", "unit"} and arguments["unit"] in unit and len(arguments["city"]) <= 8
        # The call goes back into the conversation, with the tool's result.
        back = hi + [{"role": "assistant", "tool_calls": [{"id": call["id"], "type": "function", "function": {
                     "name": "get_weather", "arguments": arguments}}]},
                     {"role": "tool", "tool_call_id": call["id"], "content": "21"}]
        assert isinstance(model.chat(back, tools=tools, tool_choice="none", max_tokens=4, seed=seed), str)
    schema = {"type": "object", "properties": {"rain": {"type": "boolean"}, "unit": {"enum": unit}},
              "required": ["rain", "unit"], "additionalProperties": False}
    answers = [model.chat(hi, response_format={"type": "json_schema", "json_schema": {"schema": schema}},
                          max_tokens=60, seed=seed, temperature=1.0) for seed in range(4)]
    parsed = [json.loads(a) for a in answers if a.endswith("}")]
    assert parsed and all(set(p) == {"rain", "unit"} and p["unit"] in unit for p in parsed), answers
    with pytest.raises(kiln.KilnError, match="not among the tools"):
        model.chat(hi, tools=tools, tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(kiln.KilnError, match="needs 'tools'"):
        model.chat(hi, tool_choice="required")


def test_model_chat_thinks_before_a_constrained_answer(source_dir, tmp_path):
    # Qwen3.5's real template opens <think> in its generation prompt, and a random model never closes it: an
    # answer whose grammar holds after the thinking, as kiln serve's does, is all thinking, cut by max_tokens.
    # A forced call is then the reply's reasoning_content without a call, and a response_format reply (the
    # same prompt: the tools shown, tool_choice none) the same thinking, not JSON.
    model = tiny_llama_under(source_dir, tmp_path, "Qwen3.5-4B.jinja")
    tools = [{"type": "function", "function": {"name": "get_time", "description": "The time in a zone",
              "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}]
    hi = [{"role": "user", "content": "Time?"}]
    shape = {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}
    for seed in range(3):
        called = model.chat(hi, tools=tools, tool_choice="required", max_tokens=16, seed=seed, temperature=1.0)
        assert called["finish_reason"] == "length" and called["tool_calls"] == [] and called["content"] == "", called
        assert called["reasoning_content"] and "</think>" not in called["reasoning_content"], called
        shaped = model.chat(hi, tools=tools, tool_choice="none", response_format=shape, max_tokens=16, seed=seed,
                            temperature=1.0)
        assert shaped.strip() == called["reasoning_content"], (shaped, called)


def test_a_sentence_transformers_folder_embeds_as_encode_did(source_dir):
    folder = os.path.join(source_dir, "tests", "hf", "fixtures", "embed-minilm")
    want = json.load(open(os.path.join(folder, "expected.json"), encoding="utf-8"))
    got = kiln.load("hf:" + folder).embed(want["texts"])
    assert len(got) == len(want["texts"])
    assert max(abs(a - b) for g, w in zip(got, want["embeddings"]) for a, b in zip(g, w)) < 1e-5
    with pytest.raises(ValueError, match="needs a text embedder"):
        kiln.load("hf:" + os.path.join(source_dir, "tests", "hf", "fixtures", "bert")).embed(["x"])
