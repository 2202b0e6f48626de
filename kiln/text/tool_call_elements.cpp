#include "kiln/text/tool_call_elements.h"

#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/text/grammar/json_schema.h"
#include "kiln/text/grammar/text_then_mark.h"
#include "kiln/text/tool_call_parameters.h"

namespace kiln::text {

namespace {

using json = nlohmann::ordered_json;
using Scan = ElementsRead::Scan;
constexpr int kMaxDepth = 32;

// How a value is written: an object with properties as its members, an
// array with items as its items, a string as raw text, any other as JSON.
enum class Kind { kText, kObject, kArray, kJson };

Kind kind_of(const json& schema) {
  if (parameter_is_text(schema)) return Kind::kText;
  if (!schema.is_object()) return Kind::kJson;
  const json type = schema.value("type", json());
  if (type == "object" && schema.contains("properties") && schema["properties"].is_object() &&
      !schema["properties"].empty())
    return Kind::kObject;
  if (type == "array" && schema.contains("items") && schema["items"].is_object()) return Kind::kArray;
  return Kind::kJson;
}

// An array's item schema, its $ref followed as a property's is.
json items_of(const json& array) {
  json wrapper = {{"properties", {{"item", array["items"]}}}};
  for (const char* container : {"$defs", "definitions"})
    if (array.contains(container)) wrapper[container] = array[container];
  return parameter_schema(wrapper, "item");
}

class Reader {
 public:
  Reader(std::string_view text, std::string_view prefix) : text_(text), prefix_(prefix) {}

  // An object's members (or, `items`, an array's) from `pos` up to `close`,
  // into `out`: each one once whole, and the closing bracket once done.
  Scan container(size_t& pos, const json& schema, bool items, std::string_view close, std::string& out, int depth) {
    if (depth > kMaxDepth) return Scan::kBad;
    out = items ? "[" : "{";
    const std::string open = std::string(prefix_) + "<", end_tag = std::string(prefix_) + "</";
    for (bool first = true;; first = false) {
      while (pos < text_.size() && std::string_view(" \n\t\r").find(text_[pos]) != std::string_view::npos) ++pos;
      const std::string_view rest = text_.substr(pos);
      if (rest.starts_with(close)) break;
      if (!rest.starts_with(open) || rest.starts_with(end_tag)) {
        const bool may_be = std::string_view(close).starts_with(rest) || std::string_view(open).starts_with(rest);
        return may_be ? Scan::kPartial : Scan::kBad;
      }
      const size_t tag_end = text_.find('>', pos + open.size());
      if (tag_end == std::string_view::npos) return Scan::kPartial;
      const std::string tag(text_.substr(pos + open.size(), tag_end - pos - open.size()));
      if (tag.empty() || tag.find_first_of("<\n\"") != std::string::npos || (items && tag != "item")) return Scan::kBad;
      size_t at = tag_end + 1;
      const std::string tag_close = end_tag + tag + ">";
      std::string value;
      if (Scan s = this->value(at, items ? items_of(schema) : parameter_schema(schema, tag), tag_close, value, depth);
          s != Scan::kDone)
        return s;
      pos = at + tag_close.size();
      out += first ? "" : ", ";
      out += items ? value : "\"" + json_escaped(tag) + "\": " + value;
    }
    out += items ? "]" : "}";
    return Scan::kDone;
  }

  // The value of an element closed by `close`, up to it, as JSON.
  Scan value(size_t& pos, const json& schema, std::string_view close, std::string& out, int depth) {
    const Kind kind = kind_of(schema);
    if (kind == Kind::kObject || kind == Kind::kArray)
      return container(pos, schema, kind == Kind::kArray, close, out, depth + 1);
    const size_t end = text_.find(close, pos);
    if (end == std::string_view::npos) return Scan::kPartial;
    out = parameter_value_json(schema, text_.substr(pos, end - pos));
    pos = end;
    return Scan::kDone;
  }

 private:
  std::string_view text_, prefix_;
};

class Compiler {
 public:
  Compiler(std::string_view prefix, std::string& rules) : prefix_(prefix), rules_(rules) {}

  // The members in the schema's order, required ones always.
  std::string members(const json& schema, const std::string& name, int depth) {
    KILN_CHECK(depth <= kMaxDepth, "arguments nest deeper than ", kMaxDepth);
    KILN_CHECK(schema["properties"].is_object(), "'properties' must be an object");
    const json required = schema.value("required", json::array());
    std::string out;
    for (const auto& [key, unused] : schema["properties"].items()) {
      const std::string one = element(key, parameter_schema(schema, key), name + "-" + rule_name_part(key), depth);
      const bool must = required.is_array() && std::find(required.begin(), required.end(), key) != required.end();
      out += (out.empty() ? "" : " ") + (must ? one : "( " + one + " )?");
    }
    return out;
  }

 private:
  std::string element(const std::string& tag, const json& schema, const std::string& name, int depth) {
    const std::string open = gbnf_literal(std::string(prefix_) + "<" + tag + ">");
    const std::string close = gbnf_literal(std::string(prefix_) + "</" + tag + ">");
    switch (kind_of(schema)) {
      case Kind::kObject:
        return open + " " + members(schema, name, depth + 1) + " " + close;
      case Kind::kArray: {
        const std::string item = element("item", items_of(schema), name + "-item", depth + 1);
        rules_ += name + "-items ::= " + item + "\n";
        const std::string bounds = repetition(schema, "minItems", "maxItems");
        return open + " " + name + "-items" + (bounds.empty() ? "*" : bounds) + " " + close;
      }
      case Kind::kText: {
        const std::string constrained = text_value_gbnf(schema, "", "[^<\\x00-\\x08\\x0B\\x0C\\x0E-\\x1F]");
        if (!constrained.empty()) return open + " " + constrained + " " + close;
        // Any text up to the prefix, which (overlapping itself nowhere) first occurs where the closing tag starts.
        rules_ += text_then_mark_gbnf(name + "-text", prefix_);
        return open + " " + name + "-text-0 " + gbnf_literal("</" + tag + ">");
      }
      case Kind::kJson: {
        const JsonSchemaRules value = json_schema_rules(schema, name + "-");
        rules_ += value.rules;
        return open + " " + value.top + " " + close;
      }
    }
    return "";
  }

  std::string_view prefix_;
  std::string& rules_;
};

}  // namespace

ElementsRead read_elements(std::string_view text, size_t pos, std::string_view prefix, const json& parameters,
                           std::string_view close) {
  ElementsRead out{Scan::kPartial};
  out.scan = Reader(text, prefix).container(pos, parameters, false, close, out.json, 0);
  out.end = pos;
  return out;
}

std::string elements_gbnf(std::string_view prefix, const json& parameters, const std::string& name,
                          std::string& rules) {
  if (kind_of(parameters) != Kind::kObject) return "";
  return Compiler(prefix, rules).members(parameters, name, 0);
}

}  // namespace kiln::text
