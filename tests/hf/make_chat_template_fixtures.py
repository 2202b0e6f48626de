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


# Small templates, one feature each, rendered by transformers' environment:
# the filters, tests, methods and Python semantics real templates lean on.
PROBES = [
    "{{ s.split() }}|{{ s.split(none, 1) }}|{{ s.rsplit(none, 1) }}|{{ s.split(' ') }}|{{ s.rsplit(' ', 2) }}",
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ s|trim }}|{{ 'abca'|trim('a') }}",
    "{{ 'a-b-c'.replace('-', '+', 1) }}|{{ 'abc'.replace('', '.') }}|{{ 'aaa'|replace('a', 'b', 2) }}",
    "{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'Hi'|upper }}{{ 'Hi'|lower }}|{{ 'x y'|title }}",
    "{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('bc') }}{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}",
    "{{ '{} and {}'.format(1, 'two') }}|{{ '{1}{0}'.format('a', 'b') }}|{{ '{x}!'.format(x=3) }}",
    "{{ '%s=%d (%.2f) %r %%'|format('k', 7, 2.5, 'q') }}|{{ '%05d|%-4s|'|format(42, 'ab') }}",
    "{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}"
    "{{ [3, 1, 2]|sort(reverse=true) }}{{ [{'n': 2}, {'n': 1}]|sort(attribute='n') }}",
    "{{ ['a', 'A', 'b']|unique|list }}{{ [1, 2, 3]|sum }}{{ [1, 5, 2]|max }}{{ ['b', 'a']|min }}",
    "{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ [1, 2, 3]|length }}{{ 'abc'|list }}{{ {'a': 1}|list }}",
    "{{ {'b': 1, 'a': 2}|dictsort }}{{ {'b': 1, 'a': 2}|dictsort(by='value') }}{{ {'b': 1, 'a': 2}|items|list }}",
    "{{ [{'r': 'u', 'c': 1}, {'r': 's', 'c': 2}]|selectattr('r', 'equalto', 's')|list }}"
    "{{ [{'r': 'u'}, {'r': 's'}]|rejectattr('r', 'in', ['s'])|map(attribute='r')|list }}",
    "{{ [1, 2, 3, 4]|select('odd')|list }}{{ [1, 2, 3, 4]|reject('even')|list }}{{ ['1', '2']|map('int')|sum }}",
    "{{ [1, 2, 3]|join(', ') }}|{{ [{'n': 'a'}, {'n': 'b'}]|join('/', attribute='n') }}|{{ [1, 2]|join }}",
    "{{ 'x\ny\n\nz'|indent(2) }}|{{ 'x\ny'|indent(2, true) }}|{{ 'x\n\ny'|indent(2, blank=true) }}|{{ 'x'|indent('> ', first=true) }}",
    "{{ 3.7|int }}{{ '42'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ '3.5'|float }}{{ 2.5|round }}{{ 3.14159|round(2) }}{{ 2.5|round(0, 'ceil') }}",
    "{{ 1 / 3 }}|{{ 10 / 4 }}|{{ 1e-5 }}|{{ 1.0e16 }}|{{ 123456789.0 }}|{{ -0.0 }}|{{ 2 ** 0.5 }}|{{ 7 % -3 }}|{{ -7 // 2.0 }}",
    """{{ none }}|{{ true }}|{{ [none, true, 1.5, 'x', ('t',), {'k': [1]}] }}|{{ "it's" }}|{{ ['it\\'s', 'say "hi"'] }}""",
    "{{ x|default('d') }}{{ ''|default('e') }}{{ ''|default('e', true) }}{{ none|default('n') }}{{ x is defined }}{{ none is none }}",
    "{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.0 is float }}{{ 'a' is string }}{{ {} is mapping }}"
    "{{ [] is iterable }}{{ x is iterable }}{{ 'a' is sequence }}{{ {} is sequence }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}",
    "{{ true is sameas true }}{{ 'A' is upper }}{{ 'a' is lower }}{{ 'a' in 'cat' }}{{ 1 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 2 is in [1, 2] }}",
    "{{ {'a': 1, 'b': {'c': [1, 2]}}|tojson }}|{{ {'a': 1, 'b': [1, {}]}|tojson(indent=2) }}|{{ [1, 'é\n\t<b>']|tojson }}",
    "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ 1.0|tojson }}",
    "{% set ns = namespace(a=1, items=[]) %}{% for i in range(3) %}{% set ns.a = ns.a * 2 %}{% endfor %}{{ ns.a }}",
    "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }}{{ ';' if not loop.last }}{% endfor %}|{{ loop is defined }}",
    "{% for x in 'abc' %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('p', 'q') }}{% endfor %}",
    "{% for x in [1, 2, 3, 4, 5] %}{% if x is even %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% macro m(a, b=2) %}[{{ a }},{{ b }},{{ varargs }},{{ kwargs }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(b=5, a=4) }}",
    "{% set t = 'x' %}{% if true %}{% set t = 'y' %}{% endif %}{{ t }}{% for i in [1] %}{% set t = 'z' %}{% endfor %}{{ t }}",
    "{{ [1, 2, 3][1:] }}{{ [1, 2, 3][::-1] }}{{ 'abcdef'[::2] }}{{ 'abc'[-1] }}{{ [1, 2][5] is defined }}{{ {'a': 1}['b'] is defined }}",
    "{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ [0] * 3 }}|{{ [1] + [2] }}|{{ 1 < 2 < 3 }}|{{ 1 == 1.0 }}|{{ 'a' != 'b' }}",
    "{{ 'yes' if [] else 'no' }}{{ 'yes' if {} else 'no' }}{{ 'yes' if '0' else 'no' }}{{ 'yes' if 0.0 else 'no' }}{{ 'a' if false }}|",
    "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 0) }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}{{ d|length }}",
    "{{ [1, 2, 3]|map('string')|join('-') }}{{ ['a', 'b']|map('upper')|list }}{{ [[1, 2], [3]]|map('length')|list }}",
    "{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]{% filter upper %}up {{ 'ok' }}{% endfilter %}",
    "{{ raise_exception('custom failure') }}",
    "{{ undefined_thing.attribute }}",
    "{{ {'a': 1}.nosuch.deeper }}",
    "{{ [].append(1) }}",
    "{{ 1 + 'a' }}",
    "{{ 'a' + 1 }}",
    "{{ none.x is defined }}{{ none['x'] is defined }}",
    "{{ (1, 2)|length }}{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ [1, 2]|reverse|list }}",
    "{{ 'Ünïcödé ✓ 日本語'|length }}{{ 'Ünïcödé'[2] }}{{ 'Ünï'|upper }}{{ 'Ünï'|reverse }}",
    "{{ '  line one\n  line two  '|trim }}|{{ 'a\tb'.split('\t') }}|{{ 'x\ny'.splitlines() }}",
]


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
    env = ctu._compile_jinja_template("").environment
    context = {"s": "  a b  c  ", "d": {"a": 1, "b": [2, 3]}}
    for probe in PROBES:
        row = {"template": probe}
        try:
            row["text"] = env.from_string(probe).render(**context)
        except Exception as e:
            row["error"] = str(e).split("\n")[0]
        expected.setdefault("probes", {"context": context, "renders": []})["renders"].append(row)
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
