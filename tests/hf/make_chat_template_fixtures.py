#!/usr/bin/env python3
"""Renders a corpus of real chat templates with transformers, the oracle for
Kiln's Jinja engine (tests/test_jinja_corpus.cpp).

    $(bench/torch2_venv.sh) tests/hf/make_chat_template_fixtures.py [--templates DIR]

The templates are the ones llama.cpp collects from the models' own
tokenizer_config.json files (models/templates in its sources, which PyPI's
llama-cpp-python source package carries: scripts/llama_cpp_source.sh finds
or downloads it). They are copied into tests/hf/fixtures/chat_templates/
with expected.json: for every template, conversation and generation-prompt
setting, the text transformers' render_jinja_template gives, or the error
it raises. strftime_now runs on a fixed clock (KILN_TEMPLATE_NOW, UTC), as
Kiln's test runs it.
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "chat_templates")
NOW = datetime.datetime(2026, 7, 4, 12, 30, 0, tzinfo=datetime.timezone.utc)
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

TOOL_CALL = {"type": "function", "id": "call00001", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}

# name -> (messages, tools)
CONVERSATIONS = {
    "user": ([{"role": "user", "content": "Hello!"}], None),
    "system_user": ([{"role": "system", "content": "You are a terse assistant."},
                     {"role": "user", "content": "What is 2+2?"}], None),
    "multi_turn": ([{"role": "system", "content": "Be kind."},
                    {"role": "user", "content": "Hi there."},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a fortune."}], None),
    "multi_line": ([{"role": "user", "content": "  First line\nsecond line  \n\n"},
                    {"role": "assistant", "content": "Answer:\n- one\n- two\n"},
                    {"role": "user", "content": "Ünïcödé ✓ 日本語 \"quoted\" and {braces}"}], None),
    "tools": ([{"role": "user", "content": "What's the weather in Paris?"}], [WEATHER_TOOL]),
    "tool_round": ([{"role": "system", "content": "You can call tools."},
                    {"role": "user", "content": "What's the weather in Paris?"},
                    {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
                    {"role": "tool", "name": "get_weather", "tool_call_id": "call00001",
                     "content": "{\"temperature\": 21, \"unit\": \"celsius\"}"},
                    {"role": "assistant", "content": "It is 21 degrees in Paris."},
                    {"role": "user", "content": "Thanks!"}], [WEATHER_TOOL]),
    "reasoning": ([{"role": "user", "content": "Is 7 prime?"},
                   {"role": "assistant", "content": "Yes.", "reasoning_content": "7 has no divisors but 1 and 7."},
                   {"role": "user", "content": "And 9?"}], None),
}


def llama_cpp_templates():
    script = os.path.join(HERE, "..", "..", "scripts", "llama_cpp_source.sh")
    src = subprocess.run([script], check=True, capture_output=True, text=True).stdout.strip()
    return os.path.join(src, "models", "templates")


def render_all(templates_dir):
    from transformers.utils import chat_template_utils as ctu

    names = sorted(f for f in os.listdir(templates_dir) if f.endswith(".jinja"))
    os.makedirs(os.path.join(OUT, "templates"), exist_ok=True)
    expected = {"now": int(NOW.timestamp()), "tokens": TOKENS, "conversations": {}, "renders": []}
    for name, (messages, tools) in CONVERSATIONS.items():
        expected["conversations"][name] = {"messages": messages, "tools": tools}
    for name in names:
        shutil.copyfile(os.path.join(templates_dir, name), os.path.join(OUT, "templates", name))
        with open(os.path.join(templates_dir, name), encoding="utf-8") as f:
            source = f.read()
        try:
            compiled = ctu._compile_jinja_template(source)
            compiled.environment.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
        except Exception as e:  # a template jinja2 refuses to compile: every render gives the error
            compiled = e
        for conversation, (messages, tools) in CONVERSATIONS.items():
            for gen in (True, False):
                row = {"template": name, "conversation": conversation, "add_generation_prompt": gen}
                try:
                    if isinstance(compiled, Exception):
                        raise compiled
                    rendered, _ = ctu.render_jinja_template(
                        conversations=[json.loads(json.dumps(messages))], tools=tools, chat_template=source,
                        add_generation_prompt=gen, **TOKENS)
                    row["text"] = rendered[0]
                except Exception as e:
                    row["error"] = str(e).split("\n")[0]
                    row["error_type"] = type(e).__name__
                expected["renders"].append(row)
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
    ok = sum("text" in r for r in expected["renders"])
    print(f"{len(names)} templates, {len(expected['renders'])} renders ({ok} texts, "
          f"{len(expected['renders']) - ok} errors) -> {OUT}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", help="a folder of .jinja templates (default: llama.cpp's models/templates)")
    a = ap.parse_args()
    os.environ["TZ"] = "UTC"
    render_all(a.templates or llama_cpp_templates())


if __name__ == "__main__":
    sys.exit(main())
