// Kiln's Jinja engine (kiln/text/jinja) against transformers' jinja2: the
// real chat templates of 70 models (llama.cpp's collection) rendered on
// conversations with and without a system turn, multi-turn, multi-line,
// with tools and tool calls, with reasoning, each byte for byte as
// transformers renders them or with the error it raises
// (tests/hf/make_chat_template_fixtures.py); then the semantics and the
// bad input one at a time.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "kiln/text/chat_template.h"
#include "kiln/text/jinja/template.h"
#include "tests/hf_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using text::jinja::Template;
using text::jinja::TemplateError;

std::string read_file(const fs::path& p) {
  std::stringstream ss;
  ss << std::ifstream(p, std::ios::binary).rdbuf();
  return ss.str();
}

TEST(JinjaCorpus, RealTemplatesRenderAsTransformersDoes) {
  const fs::path dir = hf_test::fixture("chat_templates");
  const json e = json::parse(read_file(dir / "expected.json"));
  std::map<std::string, std::optional<text::ChatTemplate>> templates;
  std::map<std::string, std::string> parse_errors;
  int texts = 0, errors = 0;
  for (const auto& row : e["renders"]) {
    const std::string name = row["template"];
    if (!templates.count(name)) {
      try {
        templates[name] = text::ChatTemplate::from_jinja(read_file(dir / "templates" / name));
        templates[name]->tokens = {e["tokens"]["bos_token"], e["tokens"]["eos_token"]};
        templates[name]->now_unix_seconds = e["now"].get<int64_t>();
      } catch (const Error& err) {
        templates[name] = std::nullopt;
        parse_errors[name] = err.what();
      }
    }
    const json& conversation = e["conversations"][row["conversation"].get<std::string>()];
    const bool gen = row["add_generation_prompt"];
    SCOPED_TRACE(name + " on '" + row["conversation"].get<std::string>() + "'" + (gen ? " +generation prompt" : ""));
    std::string got, error;
    try {
      if (!templates[name]) throw Error(parse_errors[name]);
      got = templates[name]->render_json(conversation["messages"], conversation["tools"], gen);
    } catch (const Error& err) {
      error = err.what();
    }
    if (row.contains("error")) {
      ++errors;
      EXPECT_NE(error.find(row["error"].get<std::string>()), std::string::npos)
          << "transformers raised: " << row["error"] << "\nKiln: " << (error.empty() ? "rendered" : error);
    } else {
      ++texts;
      EXPECT_EQ(error, "");
      EXPECT_EQ(got, row["text"].get<std::string>());
    }
  }
  EXPECT_GE(templates.size(), 70u);
  EXPECT_GT(texts, 900);
  EXPECT_GT(errors, 30);  // raise_exception, undefined names, the sandbox: the same errors as transformers
}

std::string render(const std::string& source, const json& context = json::object()) {
  return Template(source).render(context);
}

std::string error_of(const std::string& source, const json& context = json::object()) {
  try {
    Template(source).render(context);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "(rendered)";
}

TEST(Jinja, WhitespaceControlAsTransformersConfiguresIt) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before it.
  EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(render("x  {%- if true -%}  y  {%- endif -%}  z"), "xyz");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}"), "a\nb");  // no trimming after {{ }}
  EXPECT_EQ(render("  {%+ if true %}a{% endif %}"), "  a");
  EXPECT_EQ(render("a\n{# note #}\nb\n"), "a\nb");  // comments trim too; one final newline is dropped
  EXPECT_EQ(render("{% raw %}{{ not run }}{% endraw %}"), "{{ not run }}");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(Jinja, PythonSemanticsTemplatesRelyOn) {
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 1 / 2 }} {{ 2 ** 10 }}"),
            "True 3 -4 1 0.5 1024");
  EXPECT_EQ(render("{{ none }} {{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ (1,) }} {{ 1e20 }} {{ 0.1 + 0.2 }}"),
            "None [1, 'a', None] {'k': 'v'} (1,) 1e+20 0.30000000000000004");
  EXPECT_EQ(render("{{ 'abc'[-1] }}{{ 'abcdef'[1:4] }}{{ [1,2,3][::-1] }}{{ 'héllo'|length }}"), "cbcd[3, 2, 1]5");
  EXPECT_EQ(render("{{ x }}|{{ x is defined }}|{{ x|default('d') }}|{{ none|default('d') }}"), "|False|d|None");
  EXPECT_EQ(render("{{ ' a b '.split() }}{{ 'a,b'.split(',') }}{{ ' x '.strip() }}{{ 'ab'.startswith('a') }}"),
            "['a', 'b']['a', 'b']xTrue");
  EXPECT_EQ(render("{{ d.items()|list }} {{ d.get('z', 3) }} {{ d['a'] }} {{ d.a }}", {{"d", {{"a", 1}, {"b", 2}}}}),
            "[('a', 1), ('b', 2)] 3 1 1");
  // Undefined hashes: a dict looked up by it has no such element (Hermes 3's map[spec.type] of an untyped schema),
  // and it is iterable (empty).
  EXPECT_EQ(render("{{ {'a': 1}[x] is defined }}|{% for t in x %}{{ t }}{% endfor %}|{{ x is iterable }}"),
            "False||True");
  // jinja2's generators: always true, no len(), and tojson refuses them.
  EXPECT_EQ(render("{{ 'yes' if [1]|select('equalto', 5) else 'no' }}"), "yes");
  EXPECT_NE(error_of("{{ [1]|map('string')|length }}").find("has no len()"), std::string::npos);
  // Markup: |safe + a plain string escapes the plain one (Markup.__add__).
  EXPECT_EQ(render("{{ 'a'|safe + '<b>' }}|{{ 'a' ~ '<b>' }}"), "a&lt;b&gt;|a<b>");
  EXPECT_EQ(render("{{ {'k': 'ü', 'n': [1, 2.5, true, none]}|tojson }}"), "{\"k\": \"ü\", \"n\": [1, 2.5, true, null]}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': {}}|tojson(indent=2, sort_keys=true) }}"), "{\n  \"a\": {},\n  \"b\": 1\n}");
}

TEST(Jinja, StatementsAndScopes) {
  // A set inside a for loop does not leak out; namespace() carries state across it.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}"
                   "{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% for i in [1, 2, 3] if i != 2 %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}"
                   "{% else %}none{% endfor %}"),
            "1/2,2/2");
  EXPECT_EQ(render("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('a') }} {{ greet('b', punct='?') }}"),
            "Hi a! Hi b?");
  EXPECT_EQ(render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}"), "[in]");
  EXPECT_EQ(render("{% set block | upper %}text{% endset %}{{ block }}{% filter trim %}  t  {% endfilter %}"),
            "TEXTt");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{{ strftime_now('%Y') }}").size(), 4u);
}

TEST(Jinja, ErrorsSayWhatTransformersSays) {
  EXPECT_EQ(error_of("{{ raise_exception('System role not supported') }}"), "System role not supported");
  EXPECT_EQ(error_of("{{ x.y }}"), "'x' is undefined");
  EXPECT_EQ(error_of("{{ m.role.upper() }}", {{"m", json::object()}}), "'dict object' has no attribute 'role'");
  EXPECT_EQ(error_of("{{ [].append(1) }}"), "access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"), "can only concatenate str (not \"int\") to str");
  EXPECT_NE(error_of("{{ x|nosuchfilter }}").find("No filter named 'nosuchfilter'."), std::string::npos);
  // Inside an if, jinja2 defers an unknown filter to when it runs.
  EXPECT_EQ(render("{% if false %}{{ x|nosuchfilter }}{% endif %}ok"), "ok");
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns._x = 1 %}").find("underscore-prefixed"), std::string::npos);
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  for (const std::string bad : {"a\n{% if x %}\nno end", "a\nb\n{{ 1 + }}", "{% for %}", "{{ 'open }}",
                                "{% endfor %}", "x\n{% unknowntag %}", "{# never closed", "{{ (1, 2 }}",
                                "{% set %}", "{{ a[ }}", "{{ f(a=) }}", "{% macro m( %}{% endmacro %}"}) {
    try {
      Template t(bad);
      ADD_FAILURE() << "parsed: " << bad;
    } catch (const TemplateError& e) {
      EXPECT_NE(std::string(e.what()).find("line "), std::string::npos) << bad << ": " << e.what();
    }
  }
  try {
    Template t("line 1\nline 2\n{{ 1 + }}");
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

TEST(Jinja, RunawayTemplatesStopWithAnError) {
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("deep"), std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000000)|length }}").find("Range too big"), std::string::npos);
  text::jinja::RenderOptions few_steps;
  few_steps.limits.max_steps = 100000;  // the default (5 million) takes seconds to reach
  try {
    Template("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
        .render(json::object(), few_steps);
    ADD_FAILURE() << "10^10 iterations ran";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("steps"), std::string::npos) << e.what();
  }
  EXPECT_NE(error_of("{{ 'x' * 1000000000 }}").find("MiB"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                     "{% endfor %}")
                .find("MiB"),
            std::string::npos);
  // Nesting past the parser's bound is refused, not a stack overflow.
  EXPECT_THROW(Template("{{ " + std::string(100000, '(') + " }}"), TemplateError);
  EXPECT_THROW(Template("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}"), TemplateError);
  EXPECT_THROW(Template("{{ " + std::string(5000, '-') + "1 }}"), TemplateError);
  EXPECT_THROW(Template("{{ " + std::string(5000, '{') + " }}"), TemplateError);
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  EXPECT_THROW(Template{ifs}, TemplateError);
}

// Python's integers have no bound; Kiln's are 64-bit. Where a result fits,
// it is Python's (checked with python3); where it does not, a clear error,
// never a wrapped number (the fuzzer found these as undefined behaviour).
TEST(Jinja, IntegersAtTheEdgeOf64BitsArePythonsOrAnError) {
  const std::string min = "(-9223372036854775807 - 1)";
  EXPECT_EQ(render("{{ " + min + " % -1 }} {{ " + min + " // 2 }} {{ (-9223372036854775807) % 3 }} {{ -7 % 3 }}"),
            "0 -4611686018427387904 2 2");
  EXPECT_EQ(render("{{ (-2) ** 63 }} {{ (-1) ** 101 }} {{ 0 ** 1000 }} {{ 3 ** 39 }}"),
            "-9223372036854775808 -1 0 4052555153018976267");
  EXPECT_EQ(render("{{ range(0, 9223372036854775807, 4611686018427387904)|list }}"),
            "[0, 4611686018427387904]");
  EXPECT_EQ(render("{{ [1, 2, 3][2::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807] }}"), "[3] [3]");
  EXPECT_EQ(render("{{ 10|round(400) }} {{ 10|round }} {{ 15|round(-1) }} {{ 5.5|round(-400) }} {{ 2.5|round }} "
                   "{{ 7|round(-1, 'ceil') }} {{ 'nan'|float|int }} {{ 2.9|int }}"),
            "10 10 20 0.0 2.0 10.0 0 2");  // as jinja2 3.1 prints them
  for (const std::string overflow : std::vector<std::string>{"9223372036854775807 + 1", "-9223372036854775807 - 2", "9223372036854775807 * 2", min + " * -1",
        min + " // -1", "-" + min, min + "|abs", "2 ** 64", "3 ** 40", "[9223372036854775807, 1]|sum",
        "1e19|int", "-1e300|int", "'%d'|format(1e19)"})
    EXPECT_NE(error_of("{{ " + overflow + " }}").find("64"), std::string::npos) << overflow;
  EXPECT_EQ(error_of("{{ (1e308 * 10)|int }}"), "cannot convert float infinity to integer");
  EXPECT_NE(error_of("{{ range(-9223372036854775807, 9223372036854775807)|length }}").find("Range too big"),
            std::string::npos);
  // Sizes made from huge integers are refused before anything is allocated.
  for (const std::string huge : {"'ab' * 9223372036854775807", "'abcd' * 4611686018427387904",
                                 "[1, 2] * 9223372036854775807", "'x'|center(9223372036854775807)",
                                 "'x'|indent(9223372036854775807)", "('a\\n' * 1000)|indent(100000)"})
    EXPECT_NE(error_of("{{ " + huge + " }}").find("MiB"), std::string::npos) << huge;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// One feature per template (filters, tests, str/dict/list methods, Python's
// printing and arithmetic), as transformers' jinja2 environment renders it.
TEST(JinjaCorpus, FeatureProbesRenderAsTransformersDoes) {
  const json e = json::parse(read_file(fs::path(hf_test::fixture("chat_templates")) / "expected.json"))["probes"];
  int probes = 0;
  for (const auto& row : e["renders"]) {
    const std::string source = row["template"];
    SCOPED_TRACE(source);
    std::string got, error;
    try {
      got = Template(source).render(e["context"]);
    } catch (const TemplateError& err) {
      error = err.what();
    }
    if (row.contains("error")) {
      EXPECT_NE(error.find(row["error"].get<std::string>()), std::string::npos) << "Kiln: " << (error.empty() ? got : error);
    } else {
      EXPECT_EQ(error, "");
      EXPECT_EQ(got, row["text"].get<std::string>());
    }
    ++probes;
  }
  EXPECT_GE(probes, 45);
}

}  // namespace
}  // namespace kiln
