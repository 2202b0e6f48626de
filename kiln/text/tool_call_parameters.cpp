#include "kiln/text/tool_call_parameters.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "kiln/core/error.h"
#include "kiln/text/grammar/json_schema.h"
#include "kiln/text/grammar/regex_gbnf.h"
#include "kiln/text/python_literal.h"

namespace kiln::text {

namespace {

using json = nlohmann::ordered_json;

// Text that cannot run into a closing tag: no '<' before '/' (nor two in a
// row, which would let the second one start it), and no control
// characters but tab and line breaks.
const char* const kTextRules = R"(param-char ::= [^<\x00-\x08\x0B\x0C\x0E-\x1F]
param-text ::= ( param-char | "<" [^/<\x00-\x08\x0B\x0C\x0E-\x1F] )*
)";
// Where a value may be wrapped in <![CDATA[...]]> (MiniCPM5): bare text holds
// no '<' (so it cannot open the wrapping or close the tag), wrapped text no
// "]]>" and does not end with ']'.
const char* const kCdataTextRules = R"(param-char ::= [^<\x00-\x08\x0B\x0C\x0E-\x1F]
param-text ::= param-char* | "<![CDATA[" cdata-char* "]]>"
cdata-char ::= cdata-plain | "]" cdata-plain | "]]" [^>\]\x00-\x08\x0B\x0C\x0E-\x1F]
cdata-plain ::= [^\]\x00-\x08\x0B\x0C\x0E-\x1F]
)";

std::string trimmed(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return "";
  return std::string(text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1));
}

std::string lowered(std::string text) {
  for (char& c : text) c = char(std::tolower(uint8_t(c)));
  return text;
}

// The JSON type a value of `schema` has, as Kimi K3's parameters name it
// ("string" for text, null schema), or the non-string ones where the
// schema does not say.
std::string json_type_gbnf(const json& schema) {
  if (schema.is_null()) return gbnf_literal("string");
  const json type = schema.is_object() ? schema.value("type", json()) : json();
  if (type == "integer" || type == "number") return gbnf_literal("number");
  for (const char* t : {"boolean", "null", "object", "array"})
    if (type == t) return gbnf_literal(t);
  return "( \"number\" | \"boolean\" | \"null\" | \"object\" | \"array\" )";
}

}  // namespace

std::string text_value_gbnf(const json& schema, const std::string& any_text, const std::string& one_char) {
  if (!schema.is_object()) return any_text;
  for (const char* key : {"enum", "const"}) {
    if (!schema.contains(key)) continue;
    const json values = std::string(key) == "enum" ? schema[key] : json::array({schema[key]});
    std::string out;
    for (const json& v : values)
      if (v.is_string()) out += (out.empty() ? "( " : " | ") + gbnf_literal(v.get<std::string>());
    KILN_CHECK(!out.empty(), "'", key, "' of a string parameter holds no string");
    return out + " )";
  }
  const bool bounded = schema.contains("minLength") || schema.contains("maxLength");
  const std::string format = string_format_gbnf(schema.value("format", json()));
  KILN_CHECK(int(schema.contains("pattern")) + int(!format.empty()) + int(bounded) <= 1,
             "a string parameter takes one of pattern, format and minLength/maxLength, not several");
  if (schema.contains("pattern")) {
    KILN_CHECK(schema["pattern"].is_string(), "'pattern' must be a string");
    return "( " + parameter_text_pattern_gbnf(schema["pattern"].get<std::string>()) + " )";
  }
  if (!format.empty()) return "( " + format + " )";
  return bounded ? one_char + length_repetition(schema) : any_text;
}

std::string repetition(const json& schema, const char* min_key, const char* max_key) {
  if (!schema.contains(min_key) && !schema.contains(max_key)) return "";
  auto bound = [&](const char* key, int64_t fallback) {
    if (!schema.contains(key)) return fallback;
    KILN_CHECK(schema[key].is_number_integer() && schema[key].get<int64_t>() >= 0 && schema[key].get<int64_t>() <= 1000,
               "'", key, "' must be an integer in [0, 1000]");
    return schema[key].get<int64_t>();
  };
  const int64_t min = bound(min_key, 0), max = bound(max_key, -1);
  KILN_CHECK(max < 0 || max >= min, max_key, " is below ", min_key);
  std::string out(1, '{');  // appended: GCC 12 warns (falsely, -Wrestrict) on "..." + string
  out += std::to_string(min) + ",";
  if (max >= 0) out += std::to_string(max);
  return out += '}';
}

std::string length_repetition(const json& schema) { return repetition(schema, "minLength", "maxLength"); }

std::string rule_name_part(const std::string& key) {
  std::string out;
  for (const char c : key) out += std::isalnum(uint8_t(c)) ? c : '-';
  return out;
}

json parameter_schema(const json& parameters, const std::string& key) {
  if (!parameters.is_object() || !parameters.contains("properties") || !parameters["properties"].is_object() ||
      !parameters["properties"].contains(key))
    return nullptr;
  json schema = parameters["properties"][key];
  if (schema.is_object() && schema.contains("$ref") && schema["$ref"].is_string()) {
    const std::string ref = schema["$ref"];
    for (const char* container : {"$defs", "definitions"}) {
      const std::string prefix = std::string("#/") + container + "/";
      if (ref.rfind(prefix, 0) == 0 && parameters.contains(container) && parameters[container].is_object() &&
          parameters[container].contains(ref.substr(prefix.size())))
        schema = parameters[container][ref.substr(prefix.size())];
    }
  }
  for (const char* container : {"$defs", "definitions"})  // deeper $refs resolve against the parameters' own
    if (schema.is_object() && parameters.contains(container)) schema[container] = parameters[container];
  return schema;
}

bool parameter_is_text(const json& schema) {
  if (!schema.is_object()) return schema.is_null();
  if (schema.contains("type")) return schema["type"] == "string";
  auto strings = [](const json& values) {
    return values.is_array() && !values.empty() &&
           std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_string(); });
  };
  return (schema.contains("enum") && strings(schema["enum"])) ||
         (schema.contains("const") && schema["const"].is_string());
}

std::string json_escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (uint8_t(c) < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\u00";
          out += hex[uint8_t(c) >> 4];
          out += hex[uint8_t(c) & 15];
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string parameter_value_json(const json& schema, std::string_view value) {
  std::string quoted(1, '"');
  (quoted += json_escaped(value)) += '"';
  if (parameter_is_text(schema)) return quoted;
  const std::string text = trimmed(value);
  if (schema.is_object() && schema.value("type", json()) == "boolean" &&
      (lowered(text) == "true" || lowered(text) == "false"))
    return lowered(text);
  if (json::accept(text)) return text;
  const std::string python = python_literal_json(text);  // a template's {{ value }} of a dict or a list
  return python.empty() ? quoted : python;
}

std::string parameters_gbnf(const ToolCallFormat& f, const json& parameters, const std::string& prefix,
                            std::string& rules) {
  if (!parameters.is_object() || !parameters.contains("properties")) return "";
  KILN_CHECK(parameters["properties"].is_object(), "'properties' must be an object");
  std::vector<std::string> required;
  if (parameters.contains("required") && parameters["required"].is_array())
    for (const json& r : parameters["required"])
      if (r.is_string()) required.push_back(r);
  std::string out;
  for (const auto& [key, unused] : parameters["properties"].items()) {
    const json schema = parameter_schema(parameters, key);
    std::string value;
    const bool text = parameter_is_text(schema);
    if (text) {
      value = text_value_gbnf(schema, "param-text", "param-char");
    } else {
      const JsonSchemaRules json_value = json_schema_rules(schema, prefix + rule_name_part(key) + "-");
      rules += json_value.rules;
      value = json_value.top;
    }
    const char* name_end = !text && *f.param_name_end_json ? f.param_name_end_json : f.param_name_end;
    std::string named = gbnf_literal(f.param_begin + key + name_end);
    if (*f.param_type_marker)  // Kimi K3's: the value's JSON type
      named = gbnf_literal(f.param_begin + key + f.param_type_marker) + " " + json_type_gbnf(text ? json() : schema) +
              " " + gbnf_literal(name_end);
    const std::string one = named + " " + value + " " + gbnf_literal(f.param_end);
    const bool must = std::find(required.begin(), required.end(), key) != required.end();
    out += (out.empty() ? "" : " ") + (must ? one : "( " + one + " )?");
  }
  return out;
}

std::string keyword_arguments_gbnf(const ToolCallFormat& f, const json& parameters, const std::string& prefix,
                                   std::string& rules) {
  if (!parameters.is_object() || !parameters.contains("properties")) return "";
  KILN_CHECK(parameters["properties"].is_object(), "'properties' must be an object");
  std::set<std::string> required;
  if (const json r = parameters.value("required", json::array()); r.is_array())
    for (const json& key : r)
      if (key.is_string()) required.insert(key.get<std::string>());
  std::vector<OrderedMember> arguments;  // KEY=VALUE, in the schema's order (LFM2's) or the notation's (Gemma's sorted)
  for (const std::string& key : key_order(parameters["properties"], {}, *f.notation)) {
    KILN_CHECK(!f.notation->bare_keys || is_bare_key(key), "the parameter \"", key,
               "\" cannot be written bare in this format (letters, digits and _$.- only)");
    const JsonSchemaRules value =
        json_schema_rules(parameter_schema(parameters, key), prefix + rule_name_part(key) + "-", *f.notation);
    rules += value.rules;
    arguments.push_back({gbnf_literal(key + f.keyword_assign) + " " + value.top, required.count(key) > 0});
  }
  int count = 0;  // rules named in order
  return ordered_members_gbnf(arguments, f.notation->spaced ? "\", \"" : "\",\"", prefix + "kw",
                              [&](const std::string& base, const std::string& body) {
                                const std::string name = base + "-" + std::to_string(count++);
                                rules += name + " ::= " + body + "\n";
                                return name;
                              });
}

const char* parameter_text_rules(const ToolCallFormat& format) {
  return format.cdata_values ? kCdataTextRules : kTextRules;
}

}  // namespace kiln::text
