#include "kiln/text/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>

#include "kiln/core/error.h"
#include "kiln/text/tool_call_cursor.h"
#include "kiln/text/tool_call_elements.h"
#include "kiln/text/tool_call_parameters.h"

namespace kiln::text {

namespace {

using json = nlohmann::ordered_json;
using tool_call_reading::Cursor;
using tool_call_reading::Scan;

constexpr std::string_view kCdataBegin = "<![CDATA[", kCdataEnd = "]]>";

// The end of `text` that may begin `marker` (shorter than it), as a length.
size_t held_back(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// Where `opening` first starts in `text`, the text's start included where
// it opens with the opening unspaced (a reasoning model's content is
// trimmed: muse-glimmer's " to=" may start it as "to=").
size_t find_opening(std::string_view text, std::string_view opening) {
  const std::string_view bare_opening = unspaced(opening);
  if (bare_opening.size() < opening.size() && text.starts_with(bare_opening)) return 0;
  return text.find(opening);
}

// The end of `text` that may still become `opening` (all of it, where the
// text may still open with it unspaced), as a length.
size_t held_back_opening(std::string_view text, std::string_view opening) {
  const std::string_view bare_opening = unspaced(opening);
  if (bare_opening.size() < opening.size() && bare_opening.starts_with(text)) return text.size();
  return held_back(text, opening);
}

// XML-style parameters up to the call's end, read into `call.arguments` as
// the JSON object they stand for (`parameters`: the function's schema).
// Reading more text only extends it: a key once its name is whole, a text
// value as it comes (less what may begin its closing tag), another once it
// is closed, and the closing brace once no parameter follows.
Scan read_parameters(const ToolCallFormat& f, Cursor& c, ToolCall& call, const json& parameters) {
  call.arguments = "{";
  // A key runs to its end literal's first word ("</arg_key>" of "</arg_key>\n<arg_value>").
  const std::string_view name_end = trimmed(f.param_name_end), close = trimmed(f.param_end);
  const std::string_view key_end =
      *f.param_type_marker ? f.param_type_marker : name_end.substr(0, name_end.find_first_of(" \n"));
  const bool breaks_before_value = std::string_view(f.param_name_end).back() == '\n';
  const bool breaks_after_value = *f.param_end == '\n';
  for (bool first = true;; first = false) {
    const Scan next = c.peek_literal(f.param_begin);
    if (next == Scan::kBad) break;
    if (next == Scan::kPartial) return next;
    c.literal(f.param_begin);
    std::string_view key;
    if (Scan s = c.until(key_end, &key); s != Scan::kDone) return s;
    if (key.empty() || key.find_first_of("<\n\"") != std::string_view::npos) return Scan::kBad;
    // Text or JSON: as the format marks it, else by the parameter's schema.
    json schema = parameter_schema(parameters, std::string(key));
    if (*f.param_type_marker) {  // the written type says: "string" is text, any other JSON
      std::string type;
      if (Scan s = c.literal(f.param_type_marker); s != Scan::kDone) return s;
      if (Scan s = c.name(&type, ""); s != Scan::kDone) return s;
      if (Scan s = c.literal(name_end); s != Scan::kDone) return s;
      schema = type == "string" ? json{{"type", "string"}} : json(true);
    } else if (*f.param_name_end_json && c.peek_literal(name_end) != Scan::kDone) {
      if (Scan s = c.literal(f.param_name_end_json); s != Scan::kDone) return s;
      schema = true;  // any JSON
    } else if (Scan s = c.literal(name_end); s != Scan::kDone) {
      return s;
    } else if (*f.param_name_end_json) {
      schema = json{{"type", "string"}};
    }
    call.arguments += (first ? "\"" : ", \"") + json_escaped(key) + "\": ";
    if (breaks_before_value)
      if (Scan s = c.optional('\n'); s != Scan::kDone) return s;
    bool wrapped = false;  // in <![CDATA[...]]>: the value runs to its end
    if (f.cdata_values) {
      const Scan s = c.exact(kCdataBegin);
      if (s == Scan::kPartial) return s;
      wrapped = s == Scan::kDone;
    }
    std::string_view value;
    const Scan s = c.until(wrapped ? kCdataEnd : close, &value);
    if (s == Scan::kDone && breaks_after_value && !value.empty() && value.back() == '\n') value.remove_suffix(1);
    if (s != Scan::kDone) {
      if (parameter_is_text(schema)) {
        const std::string marker =
            wrapped ? std::string(kCdataEnd) : (breaks_after_value ? "\n" : "") + std::string(close);
        call.arguments += "\"" + json_escaped(value.substr(0, value.size() - held_back(value, marker)));
      }
      return s;
    }
    call.arguments += parameter_value_json(schema, value);
    if (wrapped) c.literal(kCdataEnd);
    if (Scan s = c.literal(close); s != Scan::kDone) return s;
  }
  call.arguments += "}";
  return Scan::kDone;
}

// Keyword arguments (LFM2's Python NAME(KEY=VALUE, ...), Gemma 4's
// NAME{KEY:VALUE,...}) up to call_end's first character, read into
// `call.arguments` as a JSON object: a pair once its value is whole, the
// closing brace once the call's end follows.
Scan read_keyword_arguments(const ToolCallFormat& f, Cursor& c, ToolCall& call) {
  call.arguments = "{";
  const std::string_view raw_quote = f.notation->bare_keys ? f.notation->string_quote : "";
  for (bool first = true;; first = false) {
    const Scan closed = c.peek_literal(std::string_view(f.call_end).substr(0, 1));
    if (closed == Scan::kDone) break;
    if (closed == Scan::kPartial) return closed;
    if (!first)
      if (Scan s = c.literal(","); s != Scan::kDone) return s;
    std::string key, value;
    if (Scan s = c.name(&key, kBareKeyPunctuation); s != Scan::kDone) return s;
    if (Scan s = c.literal(f.keyword_assign); s != Scan::kDone) return s;
    if (Scan s = c.python_literal(&value, raw_quote); s != Scan::kDone) return s;
    call.arguments += (first ? "\"" : ", \"") + json_escaped(key) + "\": " + value;
  }
  call.arguments += "}";
  return Scan::kDone;
}

// Nested elements (MiniMax M3's) up to the call's end, read into
// `call.arguments` as tool_call_elements.h reads them.
Scan read_element_arguments(const ToolCallFormat& f, Cursor& c, ToolCall& call, std::string_view text,
                            const json& parameters) {
  const ElementsRead read = read_elements(text, c.pos(), f.element_prefix, parameters, trimmed(f.call_end));
  call.arguments = read.json;
  if (read.scan != ElementsRead::Scan::kDone)
    return read.scan == ElementsRead::Scan::kPartial ? Scan::kPartial : Scan::kBad;
  c.seek(read.end);
  return Scan::kDone;
}

// The function `name` among `tools` (null when it is not offered).
const json* offered_function(const json& tools, std::string_view name) {
  if (!tools.is_array()) return nullptr;
  for (const json& tool : tools)
    if (tool.is_object() && tool.contains("function") && tool["function"].is_object() &&
        tool["function"].value("name", json()) == name)
      return &tool["function"];
  return nullptr;
}

json function_parameters(const json& tools, const std::string& name) {
  const json* function = offered_function(tools, name);
  return function ? function->value("parameters", json()) : json();
}

bool offers(const json& tools, std::string_view name) { return offered_function(tools, name) != nullptr; }

// After builtin_begin: NAME.call(KEY="VALUE", ...) to an offered tool,
// added once whole, or code_interpreter's code, added at once and growing.
Scan read_builtin_call(Cursor& c, std::vector<ToolCall>& calls, std::string_view text, const json& tools, bool whole) {
  const size_t start = c.pos();
  size_t p = start;
  auto identifier = [&] {
    const size_t from = p;
    while (p < text.size() && (std::isalnum(uint8_t(text[p])) || text[p] == '_')) ++p;
    return std::string(text.substr(from, p - from));
  };
  const std::string name = identifier();
  const std::string_view open = ".call(", rest = text.substr(p);
  if (p == text.size() || (rest.size() < open.size() && open.substr(0, rest.size()) == rest)) return Scan::kPartial;
  if (!name.empty() && rest.substr(0, open.size()) == open && offers(tools, name)) {
    p += open.size();
    std::string arguments = "{";
    for (bool first = true;; first = false) {
      while (p < text.size() && text[p] == ' ') ++p;
      if (p == text.size()) return Scan::kPartial;
      if (text[p] == ')') break;
      if (!first) {
        if (text[p++] != ',') return Scan::kBad;
        while (p < text.size() && text[p] == ' ') ++p;
      }
      const std::string key = identifier();
      if (p == text.size()) return Scan::kPartial;
      if (key.empty() || text[p++] != '=') return Scan::kBad;
      if (p == text.size()) return Scan::kPartial;
      std::string value;
      if (text[p] == '"') {  // the templates write values between quotes, unescaped
        const size_t end = text.find('"', p + 1);
        if (end == std::string_view::npos) return Scan::kPartial;
        value = "\"" + json_escaped(text.substr(p + 1, end - p - 1)) + "\"";
        p = end + 1;
      } else {
        const size_t end = text.find_first_of(",)", p);
        if (end == std::string_view::npos) return Scan::kPartial;
        const std::string bare(text.substr(p, end - p));
        value = json::accept(bare) ? bare : "\"" + json_escaped(bare) + "\"";
        p = end;
      }
      arguments += (first ? "\"" : ", \"") + json_escaped(key) + "\": " + value;
    }
    calls.push_back({name, arguments + "}"});
    return Scan::kDone;
  }
  if (!offers(tools, "code_interpreter")) return Scan::kBad;
  calls.push_back({"code_interpreter", "{\"code\": \"" + json_escaped(text.substr(start)) + (whole ? "\"}" : "")});
  return whole ? Scan::kDone : Scan::kPartial;
}

// Kimi's id for a call, as its template writes it: the text that call_begin
// ends with after its special token ("functions."), the name, the marker and the index.
std::string indexed_call_id(const ToolCallFormat& f, const std::string& name, const std::string& index) {
  const std::string_view begin = f.call_begin;
  return std::string(begin.substr(begin.rfind('>') + 1)) + name + f.id_marker + index;
}

// A call's opening, in either of the format's spellings.
Scan read_call_begin(const ToolCallFormat& f, Cursor& c) {
  const Scan first = c.peek_literal(f.call_begin);
  if (first == Scan::kDone || !*f.call_begin_alt) return c.literal(f.call_begin);
  const Scan second = c.peek_literal(f.call_begin_alt);
  if (second == Scan::kDone) return c.literal(f.call_begin_alt);
  return first == Scan::kPartial || second == Scan::kPartial ? Scan::kPartial : Scan::kBad;
}

// Reads one call into `calls` (added once its name is whole).
Scan read_call(const ToolCallFormat& f, Cursor& c, std::vector<ToolCall>& calls, std::string_view text,
               const json& tools) {
  if (Scan s = read_call_begin(f, c); s != Scan::kDone) return s;
  auto arguments = [&](ToolCall& call) {
    size_t start = std::string_view::npos;  // set where the object opens
    const Scan s = c.object(&start);
    if (s == Scan::kBad || start == std::string_view::npos) return s;
    call.arguments = std::string(text.substr(start, (s == Scan::kDone ? c.pos() : text.size()) - start));
    return s;
  };
  std::string id_first;  // Solar Open's: the id, then the name
  if (*f.name_marker) {
    if (Scan s = c.name(&id_first, ""); s != Scan::kDone) return s;
    if (Scan s = c.literal(f.name_marker); s != Scan::kDone) return s;
  }
  if (!f.is_object_call()) {
    std::string name;
    // (Kimi's functions.NAME:INDEX: the name ends at the colon.)
    if (Scan s = c.name(&name, f.id_is_index ? "_-." : "_-.:"); s != Scan::kDone) return s;
    const Scan id_scan = *f.id_marker ? c.peek_literal(f.id_marker) : Scan::kBad;
    if (id_scan == Scan::kPartial) return id_scan;
    if (*f.index_marker) {  // Kimi K3's index: read, and dropped
      std::string index;
      if (Scan s = c.literal(f.index_marker); s != Scan::kDone) return s;
      if (Scan s = c.name(&index, ""); s != Scan::kDone) return s;
    }
    std::string id;
    if (id_scan == Scan::kDone) {  // an id the model wrote: kept where the template takes it back
      c.literal(f.id_marker);
      if (Scan s = c.name(&id); s != Scan::kDone) return s;
      id = f.id_is_index ? indexed_call_id(f, name, id) : "";
    }
    if (*f.args_after) {  // harmony's content type, skipped
      std::string_view skipped;
      if (Scan s = c.until(f.args_after, &skipped); s != Scan::kDone) return s;
      c.literal(f.args_after);
    } else if (Scan s = c.literal(f.has_parameters() ? trimmed(f.name_args_separator) : f.name_args_separator);
               s != Scan::kDone) {
      return s;
    }
    if (*f.name_repeat_end) {  // muse-glimmer's invoke names the call again
      std::string again;
      if (Scan s = c.name(&again, "_-.:"); s != Scan::kDone) return s;
      if (again != name) return Scan::kBad;
      if (Scan s = c.literal(trimmed(f.name_repeat_end)); s != Scan::kDone) return s;
    }
    calls.push_back({name, "", id_first.empty() ? id : id_first});
    ToolCall& call = calls.back();
    const Scan s = f.has_parameters()    ? read_parameters(f, c, call, function_parameters(tools, name))
                   : f.keyword_arguments ? read_keyword_arguments(f, c, call)
                   : *f.element_prefix   ? read_element_arguments(f, c, call, text, function_parameters(tools, name))
                                         : arguments(call);
    if (s != Scan::kDone) return s;
  } else {
    if (Scan s = c.literal("{"); s != Scan::kDone) return s;
    bool named = false, argued = false;
    std::string early_arguments;
    for (bool first = true;; first = false) {
      if (!first) {
        if (c.peek_literal("}") == Scan::kDone) {
          c.literal("}");
          break;
        }
        if (Scan s = c.literal(","); s != Scan::kDone) return s;
      }
      std::string key;
      if (Scan s = c.string(&key); s != Scan::kDone) return s;
      if (Scan s = c.literal(":"); s != Scan::kDone) return s;
      if (key == f.name_key && !named) {
        std::string name;
        if (Scan s = c.string(&name); s != Scan::kDone) return s;
        calls.push_back({name, std::move(early_arguments)});
        named = true;
      } else if (key == f.args_key && !argued && !named) {
        // Arguments before the name (Granite's order): the call is added, whole, once its name is read.
        size_t start;
        if (Scan s = c.object(&start); s != Scan::kDone) return s;
        early_arguments = std::string(text.substr(start, c.pos() - start));
        argued = true;
      } else if (key == f.args_key && !argued) {
        if (Scan s = arguments(calls.back()); s != Scan::kDone) return s;
        argued = true;
      } else if (key == f.args_key) {
        return Scan::kBad;  // arguments twice
      } else if (Scan s = c.skip_value(); s != Scan::kDone) {
        return s;
      }
    }
    if (!argued || !named) return Scan::kBad;
  }
  return c.literal(f.call_end);
}


}  // namespace

ToolChoice tool_choice_from_json(const json& choice, const json& tools) {
  if (choice.is_null()) return {tools.is_null() ? ToolChoice::Mode::kNone : ToolChoice::Mode::kAuto, ""};
  ToolChoice out;
  if (choice == "none") {
    return {ToolChoice::Mode::kNone, ""};
  } else if (choice == "auto") {
    out.mode = ToolChoice::Mode::kAuto;
  } else if (choice == "required") {
    out.mode = ToolChoice::Mode::kRequired;
  } else if (choice.is_object() && choice.value("type", json()) == "function" && choice.contains("function") &&
             choice["function"].is_object() && choice["function"].contains("name") &&
             choice["function"]["name"].is_string()) {
    out = {ToolChoice::Mode::kNamed, choice["function"]["name"].get<std::string>()};
  } else {
    KILN_FAIL("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
              "\"function\": {\"name\"}}");
  }
  KILN_CHECK(!tools.is_null(), "'tool_choice' needs 'tools'");
  KILN_CHECK(out.mode != ToolChoice::Mode::kNamed ||
                 std::any_of(tools.begin(), tools.end(),
                             [&](const json& t) { return t["function"]["name"] == out.name; }),
             "tool_choice names '", out.name, "', which is not among the tools");
  return out;
}

ToolConstraint tool_call_constraint(const ToolCallFormat& f, const json& tools, const ToolChoice& choice,
                                    bool parallel) {
  if (choice.mode == ToolChoice::Mode::kNone) return {};
  const bool named = choice.mode == ToolChoice::Mode::kNamed;
  ToolConstraint out;
  const bool triggered = choice.mode == ToolChoice::Mode::kAuto;
  out.grammar = std::make_shared<const Grammar>(
      parse_gbnf(tool_call_gbnf(f, tools, named ? choice.name : "", parallel && !named, triggered)));
  if (triggered) {
    out.triggers = f.openings(tools);
  }
  return out;
}

namespace {

// The answer's content before its section of calls, and the calls.
ToolAnswer read_sections(const ToolCallFormat& f, std::string_view text, bool whole, const json& tools) {
  ToolAnswer answer;
  const std::vector<std::string> openings = f.openings(tools);
  size_t start = std::string_view::npos;
  for (const std::string& opening : openings) start = std::min(start, find_opening(text, opening));
  const size_t tag = *f.builtin_begin ? text.find(f.builtin_begin) : std::string_view::npos;
  if (start == std::string_view::npos && tag == std::string_view::npos) {
    size_t hold = 0;
    if (!whole)
      for (const std::string& opening : openings) hold = std::max(hold, held_back_opening(text, opening));
    if (!whole && *f.builtin_begin) hold = std::max(hold, held_back(text, f.builtin_begin));
    answer.content = std::string(text.substr(0, text.size() - hold));
    return answer;
  }
  Scan s = Scan::kDone;
  bool section = true;  // the format's section of calls follows (else a built-in tool's call was read)
  if (tag < start) {  // Llama's <|python_tag|>: a JSON call, a built-in tool's call, or code
    answer.content = std::string(text.substr(0, tag));
    Cursor c(text, tag + std::strlen(f.builtin_begin));
    c.skip_space();
    if (c.at_end()) {
      if (whole) answer.content = std::string(text);
      return answer;
    }
    if (c.peek() == '{') {
      start = c.pos();
    } else {
      s = read_builtin_call(c, answer.calls, text, tools, whole);
      section = false;
    }
  } else {
    answer.content = std::string(text.substr(0, start));
  }
  if (section) {
    Cursor c(text, start);
    s = c.literal(f.section_begin);
    for (bool first = true; s == Scan::kDone; first = false) {
      if (!first) {
        const Scan next = c.peek_literal(std::string(f.between) + f.call_begin);
        if (next != Scan::kDone || (!*f.between && !*f.call_begin)) {
          s = next == Scan::kPartial ? Scan::kPartial : Scan::kDone;
          break;
        }
        c.literal(f.between);
      }
      s = read_call(f, c, answer.calls, text, tools);
      if (s != Scan::kDone) break;
    }
  }
  // A section that is not the format's before its first call's name: the text is content.
  if (answer.calls.empty() && (s == Scan::kBad || whole)) answer.content = std::string(text);
  return answer;
}

// Functionary 3.2's answer, whose first recipient follows the prompt's
// call_begin: the content's (its calls after it), or a function's.
ToolAnswer read_recipients(const ToolCallFormat& f, std::string_view text, bool whole, const json& tools) {
  const std::string_view content = f.content_recipient;
  const bool offered = tools.is_array() && !tools.empty();
  if (text.starts_with(content)) {
    text.remove_prefix(content.size());
    return offered ? read_sections(f, text, whole, tools) : ToolAnswer{std::string(text), {}};
  }
  if (!whole && content.starts_with(text)) return {};  // may still name the content
  if (!offered) return {std::string(text), {}};
  ToolAnswer answer = read_sections(f, f.call_begin + std::string(text), whole, tools);
  if (answer.calls.empty() && !answer.content.empty()) answer.content = std::string(text);  // not a call after all
  return answer;
}

}  // namespace

ToolAnswer read_tool_answer(const ToolCallFormat& f, std::string_view text, bool whole, const json& tools) {
  return *f.content_recipient ? read_recipients(f, text, whole, tools) : read_sections(f, text, whole, tools);
}

json builtin_tools(const ToolCallFormat& f, const json& tools) {
  json names = json::array();
  if (*f.builtin_begin)
    for (const char* name : kBuiltinTools)
      if (offers(tools, name)) names.push_back(name);
  return names;
}

std::string tool_call_id(const ToolCallFormat& f, const ToolCall& call, uint64_t seed) {
  if (!call.id.empty()) return call.id;
  // Solar's ids are lowercase (its template asks for them so).
  const std::string_view digits = *f.name_marker ? "abcdefghijklmnopqrstuvwxyz0123456789"
                                                 : "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const size_t length = f.id_length ? f.id_length : 24;
  std::string id = f.id_length ? "" : "call_";
  uint64_t x = seed;
  for (size_t i = 0; i < length; ++i) {
    x += 0x9E3779B97F4A7C15ull;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    id += digits[(z ^ (z >> 31)) % digits.size()];
  }
  return id;
}

json tool_calls_json(const ToolCallFormat& f, const std::vector<ToolCall>& calls, uint64_t seed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i)
    out.push_back({{"id", tool_call_id(f, calls[i], seed + i)},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  return out;
}

}  // namespace kiln::text
