#!/usr/bin/env python3
"""Writes tests/grammar/gbnf_cases.json: GBNF grammars (llama.cpp's own
grammars/*.gbnf and grammars exercising each construct), inputs, and whether
llama.cpp's grammar engine accepts each input whole (its test-gbnf-validator,
built from the same sources as the other llama.cpp peers: scripts/llama_cpp_source.sh,
then `make test-gbnf-validator` in its build/). A grammar llama.cpp refuses is
recorded as refused; Kiln must refuse it too.

Usage: LLAMA_CPP=<llama.cpp source with build/bin/test-gbnf-validator> python3 tests/grammar/make_gbnf_fixture.py
"""
import json
import os
import subprocess
import sys
import tempfile

LLAMA_CPP = os.environ["LLAMA_CPP"]
VALIDATOR = os.path.join(LLAMA_CPP, "build", "bin", "test-gbnf-validator")
HERE = os.path.dirname(os.path.abspath(__file__))


def llama_grammar(name):
    return open(os.path.join(LLAMA_CPP, "grammars", name), encoding="utf-8").read()


CASES = [
    ("json.gbnf", llama_grammar("json.gbnf"), [
        '{}', '{"a": 1}', '{"a": [1, 2.5e-3, true, null, "x\\n\\u00e9"]}', '{"nested": {"b": {"c": []}}}',
        '{"a": 1,}', '{a: 1}', '[1, 2]', '{"a": 01}', '{"é": "日本語 😀"}', '{"a": "unterminated}', '']),
    ("json_arr.gbnf", llama_grammar("json_arr.gbnf"), [
        '[]', '[\n{"a": 1}\n]', '[{"a": 1}, {"b": [true]}]', '{"a": 1}', '[1]', '[\n{"a": 1},\n{"b": 2}\n]']),
    ("arithmetic.gbnf", llama_grammar("arithmetic.gbnf"), [
        'x=1\n', 'a = (b + 2) * c\n', 'x=1\ny=x*3\n', 'x=\n', '=1\n', 'x=1', 'X=1\n']),
    ("list.gbnf", llama_grammar("list.gbnf"), ['- a\n', '- one\n- two\n', '-a\n', '- \n', '- x\r\n', '']),
    ("chess.gbnf", llama_grammar("chess.gbnf"), [
        '1. e4 e5\n2. Nf3 Nc6\n', '1. e4 e5\n', '1. e9 e5\n', '1. O-O O-O-O\n', '1. Qxe7+ Kxe7\n']),
    ("english.gbnf", llama_grammar("english.gbnf"), ['Hello world.', 'hello', 'A b c!', '', 'ünïcode']),
    ("japanese.gbnf", llama_grammar("japanese.gbnf"), ['日本語', 'ひらがな、カタカナ。', 'abc', '']),
    ("c.gbnf", llama_grammar("c.gbnf"), [
        'int main() {\n  return 0;\n}\n', 'int f(int x) { if (x) { return x; } return 1; }\n', 'int main() {\n',
        'void g() { x = 1 + 2 * 3; }\n', 'int main(){return 0;}', 'int f(int x){if(x>1){return x;}else{return 1;}}',
        'int g(){x = f(1, 2);// note\n}']),
    ("star", 'root ::= "a"*', ['', 'a', 'aaaaa', 'b', 'ab', 'aab']),
    ("plus", 'root ::= "a"+', ['', 'a', 'aaa', 'ba']),
    ("optional", 'root ::= "a"?', ['', 'a', 'aa', 'b']),
    ("mixed quantifiers", '''
            root ::= cons+ vowel* cons? (vowel cons)*
            vowel ::= [aeiouy]
            cons ::= [bcdfghjklmnpqrstvwxyz]
            ''', ['yes', 'no', 'noon', 'rhythm', 'regardless', 'y', 'e', 'ee', 'oo', 'noono']),
    ("exact count", 'root ::= [ab]{3}', ['aba', 'ab', 'abab', 'abc']),
    ("at least", 'root ::= "x"{2,}', ['x', 'xx', 'xxxxxx', 'xxy']),
    ("between", 'root ::= [0-9]{1,3} ("." [0-9]{1,3}){3}', ['1.2.3.4', '192.168.0.255', '1234.1.1.1', '1.2.3', '1..2.3']),
    ("zero to n", 'root ::= "(" "a"{0,2} ")"', ['()', '(a)', '(aa)', '(aaa)']),
    ("group repetition", 'root ::= ("ab" | "c"){2,3} "!"', ['abc!', 'cc!', 'ababab!', 'c!', 'abcabc!']),
    ("classes and escapes", 'root ::= [a-zA-Z_] [a-zA-Z0-9_\\-]* "\\t" [^\\n\\x00-\\x1f]+ "\\n"',
     ['x1\thello world\n', '_a-b\t#\n', '9x\tno\n', 'x\t\n', 'x\ttab\there\n']),
    ("unicode escapes", 'root ::= "\\u00e9" [\\u4e00-\\u9fff]+ "\\U0001F600"?', ['é日本', 'é日本😀', 'e日本', 'é😀', 'éabc']),
    ("any character", 'root ::= "<" . . ">"', ['<ab>', '<日本>', '<a>', '<abc>', '<😀x>']),
    ("multibyte literal", 'root ::= "café " ("😀" | "日本")+', ['café 😀', 'café 日本😀', 'cafe 😀', 'café ']),
    ("negated class", 'root ::= "\\"" [^"\\\\]* "\\""', ['"abc"', '""', '"a\\"', '"é😀"', 'abc']),
    ("empty alternative", 'root ::= "a" b "c"\nb ::= "b" | ', ['ac', 'abc', 'abbc']),
    ("nullable chain", 'root ::= a b "!"\na ::= "x"?\nb ::= a*', ['!', 'x!', 'xxx!', 'y!']),
    ("comments and crlf", '# a comment\r\nroot ::= "a" | b # trailing\r\n\r\nb ::= (\r\n  "b" |\r\n  "c")\r\n', ['a', 'b', 'c', 'd']),
    ("alternative on the next line", 'root ::= "a"\n  | "b"\n', ['a']),
    ("nested groups", 'root ::= ("[" (item ("," item)*)? "]")\nitem ::= [0-9]+ | root', ['[]', '[1,2]', '[[1],[2,[3]]]', '[1,]', '[[]']),
    ("right recursion", 'root ::= "a" root | "b"', ['b', 'ab', 'aaab', 'a', 'ba']),
    ("missing root", 'start ::= "a"', ['a']),
    ("undefined rule", 'root ::= a b\na ::= "x"', ['x']),
    ("left recursion", 'root ::= root "a" | "b"', ['b']),
    ("indirect left recursion", 'root ::= a "x"\na ::= b "y"\nb ::= c? root\nc ::= "c"', ['x']),
    ("unterminated string", 'root ::= "abc', ['abc']),
    ("unknown escape", 'root ::= "\\q"', ['q']),
    ("missing ::=", 'root = "a"', ['a']),
]


def llama_accepts(grammar_path, text):
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        out = subprocess.run([VALIDATOR, grammar_path, path], capture_output=True, timeout=60).stdout.decode("utf-8", "replace")
    finally:
        os.unlink(path)
    if "Failed to initialize" in out:
        return None
    return "Input string is valid" in out


def main():
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, grammar, inputs in CASES:
            path = os.path.join(tmp, "g.gbnf")
            open(path, "wb").write(grammar.encode("utf-8"))
            results = [llama_accepts(path, text) for text in inputs]
            refused = results[0] is None
            assert all((r is None) == refused for r in results), (name, results)
            cases.append({"name": name, "grammar": grammar, "refused": refused,
                          "inputs": [] if refused else [{"text": t, "accepted": r} for t, r in zip(inputs, results)]})
            print(f"{name}: {'refused' if refused else sum(results)}/{len(inputs)} accepted", file=sys.stderr)
    json.dump({"source": "llama.cpp test-gbnf-validator (tests/grammar/make_gbnf_fixture.py)", "cases": cases},
              open(os.path.join(HERE, "gbnf_cases.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
