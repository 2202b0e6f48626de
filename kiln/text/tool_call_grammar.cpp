// Grammars for tool calls: GBNF in which a model writes only calls of the
// offered tools, spelled as its format spells them.
#include "kiln/core/error.h"
#include "kiln/text/tool_call_elements.h"
#include "kiln/text/tool_call_parameters.h"
#include "kiln/text/tool_calls.h"

namespace kiln::text {

namespace {

using json = nlohmann::ordered_json;

// Its grammar: the index any digits (the first '@', as the index comes before the name).
std::string object_call_opening_gbnf(const ToolCallFormat& f, const std::string& name) {
  if (!*f.index_key) return gbnf_literal(f.object_call_opening(name, "0"));
  const std::string text = f.object_call_opening(name, "@");
  const size_t at = text.find('@');
  return gbnf_literal(text.substr(0, at)) + " [0-9]+ " + gbnf_literal(text.substr(at + 1));
}

// A GBNF literal, or nothing for empty text.
std::string literal_or_nothing(const std::string& text) { return text.empty() ? "" : gbnf_literal(text); }

// A built-in tool's call: code_interpreter's code, or NAME.call(KEY="VALUE",
// ...) with the required parameters in order (strings: the templates write
// them between quotes, unescaped).
std::string builtin_call_gbnf(const ToolCallFormat& f, const std::string& name, const json& parameters) {
  if (name == "code_interpreter") return gbnf_literal(f.builtin_begin) + " [^\\x00]+";
  std::string out = gbnf_literal(f.builtin_begin + name + ".call(");
  bool first = true;
  if (parameters.is_object() && parameters.contains("required") && parameters["required"].is_array())
    for (const json& key : parameters["required"]) {
      const json schema = key.is_string() ? parameter_schema(parameters, key.get<std::string>()) : json();
      KILN_CHECK(schema.is_object() && schema.value("type", json()) == "string" && !schema.contains("pattern") &&
                     !schema.contains("format") && !schema.contains("enum"),
                 "built-in tool ", name,
                 ": its parameters must be plain strings (Llama's NAME.call(KEY=\"VALUE\") "
                 "holds no other)");
      const std::string length = length_repetition(schema);
      out += " " + gbnf_literal((first ? "" : ", ") + key.get<std::string>() + "=\"") + " [^\"\\x00-\\x1f]" +
             (length.empty() ? "*" : length) + " \"\\\"\"";
      first = false;
    }
  return out + " \")\"";
}

}  // namespace

std::string tool_call_gbnf(const ToolCallFormat& f, const json& tools, const std::string& only, bool parallel,
                           bool triggered) {
  KILN_CHECK(tools.is_array() && !tools.empty(), "tool_call_gbnf: no tools");
  std::string rules, calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& function = tools[i]["function"];
    const std::string name = function["name"];
    if (!only.empty() && name != only) continue;
    const json parameters = function.value("parameters", json{{"type", "object"}});
    const std::string prefix = "tool" + std::to_string(i) + "-";
    std::string body;            // the call after call_begin
    std::string json_arguments;  // the arguments' expression, where they are JSON
    try {
      if (f.is_builtin(name)) {
        rules += prefix + "call ::= " + builtin_call_gbnf(f, name, parameters) + "\n";
        calls += (calls.empty() ? "" : " | ") + prefix + "call";
        continue;
      }
      if (f.has_parameters()) {
        const std::string index = *f.index_marker ? gbnf_literal(f.index_marker) + " [0-9]+ " : "";
        const std::string again = *f.name_repeat_end ? gbnf_literal(name + f.name_repeat_end) + " " : "";
        body = gbnf_literal(name) + " " + index + gbnf_literal(f.name_args_separator) + " " + again +
               parameters_gbnf(f, parameters, prefix, rules);
      } else if (f.keyword_arguments) {
        body = gbnf_literal(name + f.name_args_separator) + " " + keyword_arguments_gbnf(f, parameters, prefix, rules);
      } else if (*f.element_prefix) {
        body = gbnf_literal(name + f.name_args_separator) + " " +
               elements_gbnf(f.element_prefix, parameters, prefix + "el", rules);
      } else {
        const JsonSchemaRules args = json_schema_rules(parameters, prefix);
        rules += args.rules;
        json_arguments = args.top;
        std::string named = f.id_is_index
                                ? gbnf_literal(name + f.id_marker) + " [0-9]+ " + gbnf_literal(f.name_args_separator)
                                : gbnf_literal(name + f.name_args_separator);
        if (*f.name_marker)
          named = "[a-z0-9]{" + std::to_string(f.id_length) + "} " + gbnf_literal(f.name_marker) + " " + named;
        body = f.is_object_call() ? object_call_opening_gbnf(f, name) + " " + args.top + " " + gbnf_literal("}")
                                  : named + " " + args.top;
      }
    } catch (const Error& e) {
      KILN_FAIL("tools[", i, "] (", name, ") parameters: ", e.what());
    }
    rules += prefix + "call ::= " + (*f.content_recipient ? "" : literal_or_nothing(f.call_begin)) + " " + body + " " +
             literal_or_nothing(f.call_end) + "\n";
    calls += (calls.empty() ? "" : " | ") + prefix + "call";
    if (*f.name_args_separator_alt) {  // the other spelling (harmony's recipient in the role), the same arguments
      rules += prefix + "call-alt ::= " + gbnf_literal(f.call_begin_alt + name + f.name_args_separator_alt) + " " +
               json_arguments + " " + literal_or_nothing(f.call_end) + "\n";
      calls += " | " + prefix + "call-alt";
    }
  }
  KILN_CHECK(!calls.empty(), "no tool is named '", only, "'");
  // A recipient's call_begin opens each call but the first, which the prompt wrote (unless a trigger starts the
  // grammar at a later one).
  const std::string recipient_begin = *f.content_recipient ? gbnf_literal(f.call_begin) : "";
  const std::string next = literal_or_nothing(f.between) + " " + recipient_begin;
  std::string root =
      "root ::= " + literal_or_nothing(f.section_begin) + " " + (triggered ? recipient_begin : "") + " call ";
  if (parallel && (*f.between || *f.call_begin))  // (a format that cannot spell a second call takes one)
    root += "( " + next + " call )* ";
  root += literal_or_nothing(f.section_end) + "\ncall ::= " + calls + "\n";
  return root + json_primitives_gbnf() + (f.notation == &kGemmaNotation ? gemma_primitives_gbnf() : "") +
         (f.has_parameters() ? parameter_text_rules(f) : "") + rules;
}

Grammar grammar_after_content_recipient(const ToolCallFormat& f, const Grammar& answer) {
  const std::string name = unused_rule_prefix(answer, "recipient") + "-answer";
  return parse_gbnf(answer.source + "\n" + name + " ::= " + gbnf_literal(f.content_recipient) + " " +
                        answer.rules[size_t(answer.root)].name + "\n",
                    name);
}

}  // namespace kiln::text
