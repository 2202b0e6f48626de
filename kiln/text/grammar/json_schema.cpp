#include "kiln/text/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/text/grammar/json_number_gbnf.h"
#include "kiln/text/grammar/regex_gbnf.h"
#include "kiln/text/grammar/text_then_mark.h"

namespace kiln::text {

namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;
constexpr size_t kMaxRules = 10000;
constexpr int64_t kMaxRepeat = 1000;

// The JSON values' grammar, whitespace between tokens bounded as llama.cpp's json.gbnf bounds it.
const char* const kPrimitives = R"(ws ::= | " " | "\n" [ \t]{0,20}
json-char ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
json-string ::= "\"" json-char* "\""
json-number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
json-integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws ( json-string ws ":" ws json-value ws ( "," ws json-string ws ":" ws json-value ws )* )? "}"
json-array ::= "[" ws ( json-value ws ( "," ws json-value ws )* )? "]"
)";

// Keywords that only describe: they change no document's validity.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly",
                                            "$defs", "definitions", "strict", "name", "contentMediaType",
                                            "contentEncoding"};
// Keywords this compiler honours (per type, checked below).
const std::set<std::string> kHandled = {"type", "enum", "const", "anyOf", "oneOf", "$ref", "properties", "required",
                                        "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
                                        "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                                        "exclusiveMinimum", "exclusiveMaximum", "allOf", "multipleOf"};

// String formats written exactly (dates valid in every year: February stops
// at the 28th); any other format is an annotation, as JSON Schema's
// validators take it by default.
const std::map<std::string, std::string> kFormats = {
    {"date", R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | )"
             R"(( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))"},
    {"time", R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? )"
             R"(( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
    {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
};

// A GBNF literal spelling `text` exactly.
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const uint8_t c = uint8_t(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace

const ValueNotation kJsonNotation = {"\"", false, true, "json-", false};
const ValueNotation kGemmaNotation = {"<|\"|>", true, false, "gemma-", true};

std::vector<std::string> key_order(const json& properties, const std::set<std::string>& required,
                                   const ValueNotation& n) {
  std::vector<std::string> keys;
  for (const auto& [key, unused] : properties.items()) keys.push_back(key);
  auto lower = [](std::string k) {
    for (char& c : k) c = char(std::tolower(uint8_t(c)));
    return k;
  };
  if (n.sorted_keys) {  // dictsort: by the lowercased key
    std::stable_sort(keys.begin(), keys.end(), [&](const std::string& a, const std::string& b) { return lower(a) < lower(b); });
  } else {
    std::stable_partition(keys.begin(), keys.end(), [&](const std::string& k) { return required.count(k) > 0; });
  }
  return keys;
}

std::string ordered_members_gbnf(const std::vector<OrderedMember>& members, const std::string& separator,
                                 const std::string& name,
                                 const std::function<std::string(const std::string&, const std::string&)>& add_rule) {
  // The leading required members are written in one sequence (an object
  // whose members are all required takes no more rules than that); then
  // after(i): members i... once one is written (each after the separator),
  // and from(i): the first written is i or later.
  const size_t n = members.size();
  size_t k = 0;
  while (k < n && members[k].required) ++k;
  std::vector<std::string> after(n + 1), from(n + 1);
  bool later_required = false;
  for (size_t i = n; i-- > k;) {
    const OrderedMember& m = members[i];
    const std::string next = separator + " " + m.gbnf;
    after[i] = add_rule(name + "-after", (m.required ? next : "( " + next + " )?") + " " + after[i + 1]);
    const std::string first = m.gbnf + " " + after[i + 1];
    if (k > 0) continue;  // (from() is only wanted when no member leads)
    if (m.required) {
      from[i] = add_rule(name + "-from", first);
    } else if (later_required) {
      from[i] = add_rule(name + "-from", first + " | " + from[i + 1]);
    } else {
      from[i] = add_rule(name + "-from", "( " + first + (from[i + 1].empty() ? "" : " | " + from[i + 1]) + " )?");
    }
    later_required = later_required || m.required;
  }
  if (k == 0) return from[0];
  std::string out = members[0].gbnf;
  for (size_t i = 1; i < k; ++i) out += " " + separator + " " + members[i].gbnf;
  return out + " " + after[k];
}

std::string gemma_primitives_gbnf() {
  // A string's text runs to the first quote mark; a bounded one holds no '<' (so no mark).
  return "gemma-string ::= \"<|\\\"|>\" gemma-text-0\n" + text_then_mark_gbnf("gemma-text", "<|\"|>") +
         "gemma-char ::= [^<\\x00]\n"
         "gemma-key ::= [a-zA-Z0-9_$.-]+\n"
         "gemma-value ::= gemma-object | gemma-array | gemma-string | json-number | json-boolean | json-null\n"
         "gemma-object ::= \"{\" ( gemma-key \":\" gemma-value ( \",\" gemma-key \":\" gemma-value )* )? \"}\"\n"
         "gemma-array ::= \"[\" ( gemma-value ( \",\" gemma-value )* )? \"]\"\n";
}

bool is_bare_key(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(uint8_t(c)) || kBareKeyPunctuation.find(c) != std::string_view::npos;
  });
}

std::string spell_value(const nlohmann::ordered_json& value, const ValueNotation& n) {
  if (!n.bare_keys) return value.dump();
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    KILN_CHECK(text.find(n.string_quote) == std::string::npos, "the value ", value.dump(), " holds ", n.string_quote,
               ", which this notation cannot write");
    return n.string_quote + text + n.string_quote;
  }
  if (!value.is_object() && !value.is_array()) return value.dump();
  std::string out(1, value.is_object() ? '{' : '[');
  for (const auto& [key, item] : value.items()) {
    if (out.size() > 1) out += ',';
    KILN_CHECK(!value.is_object() || is_bare_key(key), "the key \"", key, "\" cannot be written bare");
    if (value.is_object()) (out += key) += ':';
    out += spell_value(item, n);
  }
  return out += value.is_object() ? '}' : ']';
}

std::string string_format_gbnf(const nlohmann::ordered_json& format) {
  if (!format.is_string()) return "";
  if (format == "date-time") return kFormats.at("date") + " \"T\" " + kFormats.at("time");
  const auto it = kFormats.find(format.get<std::string>());
  return it == kFormats.end() ? "" : it->second;
}

namespace {

class Compiler {
 public:
  // `prefix` starts every rule's name, so that several schemas' rules can share one grammar.
  Compiler(const json& root, std::string prefix, const ValueNotation& notation)
      : root_(root), prefix_(std::move(prefix)), n_(notation), ws_(notation.spaced ? " ws " : " ") {}

  JsonSchemaRules compile() {
    JsonSchemaRules out;
    out.top = visit(root_, prefix_ + "value", "#", 0);
    for (const auto& [name, body] : rules_) out.rules += name + " ::= " + body + "\n";
    return out;
  }

 private:
  const json& root_;
  const std::string prefix_;
  const ValueNotation& n_;
  const std::string ws_;  // between two tokens: " ws ", or " " where the notation has no whitespace

  std::string primitive(const char* kind) const { return n_.rule_prefix + std::string(kind); }
  // A string's text between the notation's quotes.
  std::string quoted(const std::string& text) const {
    return literal(n_.string_quote) + " " + text + " " + literal(n_.string_quote);
  }
  std::string spelled(const json& value, const std::string& where) const {
    try {
      return literal(spell_value(value, n_));
    } catch (const Error& e) {
      refuse(where, e.what());
    }
  }
  std::map<std::string, std::string> rules_;  // name -> body
  std::map<std::string, std::string> refs_;   // $ref -> rule name

  [[noreturn]] static void refuse(const std::string& where, const std::string& what) {
    KILN_FAIL("JSON schema at ", where, ": ", what);
  }

  std::string add_rule(const std::string& base, const std::string& body) {
    KILN_CHECK(rules_.size() < kMaxRules, "JSON schema: more than ", kMaxRules, " rules; simplify the schema");
    std::string name;
    for (const char c : base) name += (std::isalnum(uint8_t(c)) ? c : '-');
    if (name.empty() || !std::isalpha(uint8_t(name[0]))) name = "r-" + name;
    std::string unique = name;
    for (int i = 2; rules_.count(unique); ++i) unique = name + "-" + std::to_string(i);
    rules_[unique] = body;
    return unique;
  }

  static int64_t count(const json& s, const char* key, int64_t fallback, const std::string& where) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(kMaxRepeat)
                                                 : v.is_number_integer() && v.get<int64_t>() >= 0 &&
                                                       v.get<int64_t>() <= kMaxRepeat;
    if (!in_range)
      refuse(where, std::string("'") + key + "' must be an integer in [0, " + std::to_string(kMaxRepeat) + "]");
    return v.get<int64_t>();
  }

  // item repeated [min, max] times (max < 0: unbounded), joined by `separator`.
  static std::string repetition(const std::string& item, int64_t min, int64_t max, const std::string& separator) {
    if (max == 0) return "";
    const std::string rest = "( " + separator + " " + item + " )";
    std::string tail = max < 0 ? rest + "{" + std::to_string(std::max<int64_t>(min - 1, 0)) + ",}"
                               : rest + "{" + std::to_string(std::max<int64_t>(min - 1, 0)) + "," +
                                     std::to_string(max - 1) + "}";
    const std::string all = item + " " + tail;
    return min == 0 ? "( " + all + " )?" : all;
  }

  // A number that is a multiple of s["multipleOf"]: its automaton's rules
  // (json_number_gbnf.h), each under a name of its own.
  std::string multiple_of(const json& s, bool integer, const NumberBounds& bounds, const std::string& name,
                          const std::string& where) {
    if (bounds.lower || bounds.upper) refuse(where, "'multipleOf' with minimum or maximum is not supported");
    if (!s["multipleOf"].is_number() || !(s["multipleOf"].get<double>() > 0))
      refuse(where + "/multipleOf", "must be a number above 0");
    MultipleOfRules rules;
    try {
      rules = multiple_of_gbnf(s["multipleOf"].dump(), integer);
    } catch (const Error& e) {
      refuse(where + "/multipleOf", e.what());
    }
    std::vector<std::string> names;
    for (size_t i = 0; i < rules.bodies.size(); ++i) names.push_back(add_rule(name + "-m" + std::to_string(i), ""));
    for (size_t i = 0; i < rules.bodies.size(); ++i) {
      std::string& body = rules_[names[i]] = rules.bodies[i];
      for (size_t at; (at = body.find('@')) != std::string::npos;) {
        const size_t end = body.find('@', at + 1);
        body.replace(at, end - at + 1, names[std::stoul(body.substr(at + 1, end - at - 1))]);
      }
    }
    return names[0];
  }

  // minimum/maximum and their exclusive forms (numbers; booleans beside
  // minimum/maximum in draft 4), the tighter bound where both are given.
  static NumberBounds number_bounds(const json& s, const std::string& where) {
    NumberBounds bounds;
    auto take = [&](std::optional<NumberBound>& bound, const char* inclusive, const char* exclusive, bool lower) {
      auto tighter = [&](double value, bool is_exclusive) {
        if (!bound || (lower ? value > bound->value : value < bound->value) ||
            (value == bound->value && is_exclusive))
          bound = NumberBound{value, is_exclusive};
      };
      const bool draft4 = s.contains(exclusive) && s[exclusive].is_boolean();
      if (s.contains(inclusive)) {
        if (!s[inclusive].is_number()) refuse(where + "/" + inclusive, "must be a number");
        tighter(s[inclusive].get<double>(), draft4 && s[exclusive].get<bool>());
      }
      if (s.contains(exclusive) && !draft4) {
        if (!s[exclusive].is_number()) refuse(where + "/" + exclusive, "must be a number");
        tighter(s[exclusive].get<double>(), true);
      }
    };
    take(bounds.lower, "minimum", "exclusiveMinimum", true);
    take(bounds.upper, "maximum", "exclusiveMaximum", false);
    return bounds;
  }

  std::string visit(const json& s, const std::string& name, const std::string& where, int depth) {
    if (depth > kMaxDepth) refuse(where, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(where, "`false` allows no document");
      return primitive("value");
    }
    if (!s.is_object()) refuse(where, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items())
      if (!kAnnotations.count(key) && !kHandled.count(key))
        refuse(where, "'" + key + "' is not supported (Kiln refuses it rather than ignore it)");
    if (s.contains("$ref")) return reference(s["$ref"], where, depth);
    const std::string format = s.contains("format") ? string_format_gbnf(s["format"]) : "";  // "": annotation
    if (s.contains("allOf")) {
      // One schema (what Pydantic v1 writes around a $ref); more would need
      // their intersection.
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1)
        refuse(where + "/allOf", "only an allOf of one schema is supported (Kiln does not intersect schemas)");
      for (const auto& [key, value] : s.items())
        if (!kAnnotations.count(key) && key != "allOf")
          refuse(where, "'" + key + "' beside allOf is not supported: move it into the allOf's schema");
      return visit(all[0], name, where + "/allOf/0", depth + 1);
    }
    if (s.contains("const")) return add_rule(name, spelled(s["const"], where + "/const"));
    if (s.contains("enum")) {
      const json& values = s["enum"];
      if (!values.is_array() || values.empty()) refuse(where + "/enum", "must be a non-empty array");
      std::string body;
      for (const json& v : values) body += (body.empty() ? "" : " | ") + spelled(v, where + "/enum");
      return add_rule(name, body);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& branches = s[key];
      if (!branches.is_array() || branches.empty()) refuse(where + "/" + key, "must be a non-empty array");
      std::string body;
      for (size_t i = 0; i < branches.size(); ++i)
        body += (i ? " | " : "") + visit(branches[i], name + "-" + std::to_string(i), where + "/" + key + "/" +
                                         std::to_string(i), depth + 1);
      return add_rule(name, body);
    }
    if (!s.contains("type")) {
      if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") || !format.empty())
        refuse(where, "a string's keywords (pattern, format, minLength, maxLength) need \"type\": \"string\" beside them");
      for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
        if (s.contains(key))
          refuse(where, std::string("'") + key + "' needs \"type\": \"integer\" or \"number\" beside it");
      if (s.contains("properties") || s.contains("additionalProperties")) return object(s, name, where, depth);
      if (s.contains("items") || s.contains("prefixItems")) return array(s, name, where, depth);
      return primitive("value");
    }
    const json& type = s["type"];
    if (type.is_array()) {
      if (type.empty()) refuse(where + "/type", "an empty list of types allows nothing");
      std::string body;
      for (const json& t : type) {
        if (!t.is_string()) refuse(where + "/type", "must be a string or an array of strings");
        json one = s;
        one["type"] = t;
        body += (body.empty() ? "" : " | ") + visit(one, name + "-" + t.get<std::string>(), where, depth + 1);
      }
      return add_rule(name, body);
    }
    if (!type.is_string()) refuse(where + "/type", "must be a string or an array of strings");
    const std::string t = type;
    if (t == "object") return object(s, name, where, depth);
    if (t == "array") return array(s, name, where, depth);
    if (t == "string" && s.contains("pattern")) {
      if (s.contains("minLength") || s.contains("maxLength"))
        refuse(where, "'pattern' with minLength or maxLength is not supported: put the length in the pattern");
      if (!s["pattern"].is_string()) refuse(where + "/pattern", "must be a string");
      if (!format.empty())
        refuse(where, "'pattern' with a 'format' is not supported: write the format into the pattern");
      try {
        const std::string pattern = s["pattern"];
        return add_rule(
            name, n_.bare_keys ? quoted(parameter_text_pattern_gbnf(pattern)) : json_string_pattern_gbnf(pattern));
      } catch (const Error& e) {
        refuse(where + "/pattern", e.what());
      }
    }
    if (t == "string" && !format.empty()) {
      if (s.contains("minLength") || s.contains("maxLength"))
        refuse(where, "'format' with minLength or maxLength is not supported: the format fixes the length");
      return add_rule(name, quoted(format));
    }
    if (t == "string") {
      const int64_t min = count(s, "minLength", 0, where), max = count(s, "maxLength", -1, where);
      if (min == 0 && max < 0) return primitive("string");
      if (max >= 0 && max < min) refuse(where, "maxLength is below minLength");
      return add_rule(name, quoted(primitive("char") + "{" + std::to_string(min) + "," +
                                   (max < 0 ? "" : std::to_string(max)) + "}"));
    }
    if (t == "number" || t == "integer") {
      const NumberBounds bounds = number_bounds(s, where);
      if (s.contains("multipleOf")) return multiple_of(s, t == "integer", bounds, name, where);
      if (!bounds.lower && !bounds.upper) return t == "number" ? "json-number" : "json-integer";
      try {
        return add_rule(name, t == "number" ? bounded_number_gbnf(bounds) : bounded_integer_gbnf(bounds));
      } catch (const Error& e) {
        refuse(where, e.what());
      }
    }
    if (t == "boolean") return "json-boolean";
    if (t == "null") return "json-null";
    refuse(where + "/type", "unknown type '" + t + "'");
  }

  std::string reference(const json& ref, const std::string& where, int depth) {
    if (!ref.is_string()) refuse(where + "/$ref", "must be a string");
    const std::string path = ref;
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    std::string def;
    for (const char* prefix : {"#/$defs/", "#/definitions/"})
      if (path.rfind(prefix, 0) == 0) def = path.substr(std::string(prefix).size());
    const char* container = path.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    if (def.empty() || !root_.contains(container) || !root_[container].contains(def))
      refuse(where + "/$ref", "'" + path + "' is not a definition in this schema's $defs or definitions");
    // Named before it is visited, so that a definition may refer to itself.
    const std::string name = add_rule(prefix_ + "def-" + def, "");
    refs_[path] = name;
    rules_[name] = visit(root_[container][def], name + "-body", path, depth + 1);
    return name;
  }

  std::string object(const json& s, const std::string& name, const std::string& where, int depth) {
    const json properties = s.value("properties", json::object());
    if (!properties.is_object()) refuse(where + "/properties", "must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse(where + "/required", "must be an array of names");
      for (const json& r : s["required"]) {
        if (!r.is_string() || !properties.contains(r.get<std::string>()))
          refuse(where + "/required", "names " + r.dump() + ", which is not among the properties");
        required.insert(r.get<std::string>());
      }
    }
    const json extra = s.value("additionalProperties", properties.empty() ? json(true) : json(false));
    if (properties.empty() && extra == json(true)) return primitive("object");  // any object
    std::vector<OrderedMember> members;  // "key" ws ":" ws value, in the notation's order
    for (const std::string& key : key_order(properties, required, n_)) {
      if (n_.bare_keys && !is_bare_key(key))
        refuse(where + "/properties", "the key \"" + key + "\" cannot be written bare (letters, digits and _$.- only)");
      const std::string value = visit(properties[key], name + "-" + key, where + "/properties/" + key, depth + 1);
      members.push_back({(n_.bare_keys ? literal(key + ":") : literal(json(key).dump()) + ws_ + "\":\"") + ws_ + value,
                         required.count(key) > 0});
    }
    std::string other;  // any other key: a string key and the additionalProperties value
    if (!(extra.is_boolean() && !extra.get<bool>())) {
      const std::string value = extra.is_boolean()
                                    ? primitive("value")
                                    : visit(extra, name + "-extra", where + "/additionalProperties", depth + 1);
      other = primitive(n_.bare_keys ? "key" : "string") + ws_ + "\":\"" + ws_ + value;
    }
    // The properties, then any others.
    const std::string comma = ws_ + "\",\"" + ws_;
    if (!other.empty()) members.push_back({other + " (" + comma + other + " )*", false});
    const std::string inside = ordered_members_gbnf(
        members, comma, name, [&](const std::string& base, const std::string& body) { return add_rule(base, body); });
    return add_rule(name, "\"{\"" + ws_ + inside + ws_ + "\"}\"");
  }

  // Arrays: the prefixItems in order, then `items` (a schema, or false for
  // none), minItems and maxItems counting both.
  std::string array(const json& s, const std::string& name, const std::string& where, int depth) {
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const json& items = s["prefixItems"];
      if (!items.is_array()) refuse(where + "/prefixItems", "must be an array of schemas");
      for (size_t i = 0; i < items.size(); ++i)
        prefix.push_back(visit(items[i], name + "-" + std::to_string(i), where + "/prefixItems/" +
                               std::to_string(i), depth + 1));
    }
    if (s.contains("items") && s["items"].is_array())
      refuse(where + "/items", "an array of schemas (draft 2019 tuples) is not supported: write prefixItems");
    const bool more = !(s.contains("items") && s["items"] == json(false));
    const std::string item = !more                 ? ""
                             : s.contains("items") ? visit(s["items"], name + "-item", where + "/items", depth + 1)
                                                   : primitive("value");
    const int64_t min = count(s, "minItems", 0, where);
    int64_t max = count(s, "maxItems", -1, where);
    if (!more) max = max < 0 ? int64_t(prefix.size()) : std::min<int64_t>(max, int64_t(prefix.size()));
    if (max >= 0 && max < min) refuse(where, more ? "maxItems is below minItems" : "minItems asks for more items than "
                                                                                   "prefixItems has, and items is false");
    const std::string comma = ws_ + "\",\"" + ws_;
    if (prefix.empty()) return add_rule(name, "\"[\"" + ws_ + repetition(item, min, max, comma) + ws_ + "\"]\"");
    // Item i follows i items: the prefix's own schema, then `items`'s; an
    // item is optional once minItems are written.
    std::string rest;
    const int64_t n = int64_t(prefix.size());
    if (more && (max < 0 || max > n))
      rest = repetition(comma + item, std::max<int64_t>(min - n, 0), max < 0 ? -1 : max - n, "");
    for (int64_t i = std::min(n, max < 0 ? n : max) - 1; i >= 0; --i) {
      const std::string here = (i ? comma : "") + prefix[size_t(i)] + (rest.empty() ? "" : " " + rest);
      rest = i < min ? here : "( " + here + " )?";
    }
    return add_rule(name, "\"[\"" + ws_ + rest + ws_ + "\"]\"");
  }
};

}  // namespace

std::string gbnf_literal(const std::string& text) { return literal(text); }

const char* json_primitives_gbnf() { return kPrimitives; }

JsonSchemaRules json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix,
                                  const ValueNotation& notation) {
  return Compiler(schema, prefix, notation).compile();
}

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  const JsonSchemaRules rules = json_schema_rules(schema, "root-", kJsonNotation);
  return "root ::= " + rules.top + "\n" + kPrimitives + rules.rules;
}

std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema) {
  return std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf(schema)));
}

}  // namespace kiln::text
