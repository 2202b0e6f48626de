#include "kiln/text/tool_calls.h"

#include <algorithm>
#include <cctype>

#include "kiln/core/error.h"
#include "kiln/text/grammar/json_schema.h"

namespace kiln::text {

namespace {

using json = nlohmann::ordered_json;

// name, section_begin, call_begin, args_key, name_args_separator, id_marker, call_end, between, section_end, id_length
const std::vector<ToolCallFormat> kFormats = {
    // Hermes 2/3, Qwen2.5, Qwen3, QwQ, Granite 4, MiMo...
    {"hermes", "", "<tool_call>\n", "arguments", "", "", "\n</tool_call>", "\n", "", 0},
    // Mistral Nemo (tokenizer v3): a JSON array after [TOOL_CALLS].
    {"mistral", "[TOOL_CALLS][", "", "arguments", "", "", "", ", ", "]", 9},
    // Mistral Small 3.2, Devstral, Ministral 3 (tokenizer v11+): [TOOL_CALLS]name[ARGS]{...} per call.
    {"mistral-v11", "", "[TOOL_CALLS]", "", "[ARGS]", "[CALL_ID]", "", "", "", 9},
    {"deepseek-v3.1", "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>",
     "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>", "",
     "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>", "",
     "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>", "",
     "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>", 0},
    {"apriel", "<tool_calls>[", "", "arguments", "", "", "", ", ", "]</tool_calls>", 0},
    {"nemotron-v2", "<TOOLCALL>[", "", "arguments", "", "", "", ", ", "]</TOOLCALL>", 0},
    {"gigachat3.1", "", "<|function_call|>", "arguments", "", "", "", "", "", 0},
    {"functionary-v3.1", "", "<function=", "", ">", "", "</function>", "", "", 0},
    // Llama 3.1, 3.2, 3.3: a bare JSON object, its arguments under "parameters".
    {"llama3-json", "", "", "parameters", "", "", "", "; ", "", 0},
};

bool is_object_call(const ToolCallFormat& f) { return *f.name_args_separator == 0; }

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The text of one call, as the format spells it (the object's closing brace
// left off: templates may write more keys after the arguments).
std::string spell_call_opening(const ToolCallFormat& f, const std::string& name, const std::string& arguments) {
  if (!is_object_call(f)) return f.call_begin + name + f.name_args_separator + arguments;
  return f.call_begin + ("{\"name\": " + json(name).dump() + ", \"" + f.args_key + "\": " + arguments);
}

// A GBNF literal, or nothing for empty text.
std::string literal_or_nothing(const std::string& text) { return text.empty() ? "" : gbnf_literal(text); }

// Reads a section left to right. Each step answers kDone (read), kPartial
// (the text ends inside it) or kBad (the text is not what the format spells).
enum class Scan { kDone, kPartial, kBad };

class Cursor {
 public:
  explicit Cursor(std::string_view text, size_t pos = 0) : text_(text), pos_(pos) {}
  size_t pos() const { return pos_; }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }
  void skip_space() {
    while (!at_end() && is_space(peek())) ++pos_;
  }

  // `literal`, after any whitespace; its own whitespace matches any run of it.
  Scan literal(std::string_view literal) {
    skip_space();
    for (size_t i = 0; i < literal.size(); ++i) {
      if (is_space(literal[i])) {
        skip_space();
        continue;
      }
      if (at_end()) return Scan::kPartial;
      if (peek() != literal[i]) return Scan::kBad;
      ++pos_;
    }
    return Scan::kDone;
  }

  // A JSON string, decoded into `out`.
  Scan string(std::string* out) {
    skip_space();
    if (at_end()) return Scan::kPartial;
    if (peek() != '"') return Scan::kBad;
    const size_t start = pos_;
    size_t end;
    if (Scan s = skip_string(&end); s != Scan::kDone) return s;
    const json decoded = json::parse(text_.substr(start, end - start), nullptr, false);
    if (decoded.is_discarded() || !decoded.is_string()) return Scan::kBad;
    if (out) *out = decoded.get<std::string>();
    pos_ = end;
    return Scan::kDone;
  }

  // A JSON object, as written: [start, pos) once read.
  Scan object(size_t* start) {
    skip_space();
    if (at_end()) return Scan::kPartial;
    if (peek() != '{') return Scan::kBad;
    *start = pos_;
    return skip_value();
  }

  // Any JSON value, skipped: strings and brackets followed; scalars run to
  // a delimiter (the format's text after them catches what is not JSON).
  Scan skip_value() {
    skip_space();
    if (at_end()) return Scan::kPartial;
    if (peek() == '"') {
      size_t end;
      const Scan s = skip_string(&end);
      if (s == Scan::kDone) pos_ = end;
      return s;
    }
    if (peek() != '{' && peek() != '[') {
      const size_t start = pos_;
      while (!at_end() && !is_space(peek()) && peek() != ',' && peek() != '}' && peek() != ']') ++pos_;
      if (at_end()) return Scan::kPartial;
      return pos_ > start ? Scan::kDone : Scan::kBad;
    }
    std::string open;  // the brackets still open
    while (!at_end()) {
      const char c = peek();
      if (c == '"') {
        size_t end;
        if (Scan s = skip_string(&end); s != Scan::kDone) return s;
        pos_ = end;
        continue;
      }
      ++pos_;
      if (c == '{' || c == '[') {
        open += c == '{' ? '}' : ']';
      } else if (c == '}' || c == ']') {
        if (open.back() != c) return Scan::kBad;
        open.pop_back();
        if (open.empty()) return Scan::kDone;
      }
    }
    return Scan::kPartial;
  }

  // A bare name (a function's: letters, digits and _-.:).
  Scan name(std::string* out) {
    skip_space();
    const size_t start = pos_;
    while (!at_end() && (std::isalnum(uint8_t(peek())) || std::string_view("_-.:").find(peek()) != std::string_view::npos)) ++pos_;
    if (at_end()) return Scan::kPartial;
    if (pos_ == start) return Scan::kBad;
    *out = std::string(text_.substr(start, pos_ - start));
    return Scan::kDone;
  }

  // Whether the text here starts with `literal` (after whitespace), without moving.
  Scan peek_literal(std::string_view literal) const {
    Cursor copy = *this;
    return copy.literal(literal);
  }

 private:
  Scan skip_string(size_t* end) const {
    for (size_t i = pos_ + 1; i < text_.size(); ++i) {
      if (text_[i] == '\\') {
        ++i;
      } else if (text_[i] == '"') {
        *end = i + 1;
        return Scan::kDone;
      } else if (uint8_t(text_[i]) < 0x20) {
        return Scan::kBad;
      }
    }
    return Scan::kPartial;
  }

  std::string_view text_;
  size_t pos_;
};

// Reads one call into `calls` (added once its name is whole).
Scan read_call(const ToolCallFormat& f, Cursor& c, std::vector<ToolCall>& calls, std::string_view text) {
  if (Scan s = c.literal(f.call_begin); s != Scan::kDone) return s;
  auto arguments = [&](ToolCall& call) {
    size_t start = std::string_view::npos;  // set where the object opens
    const Scan s = c.object(&start);
    if (s == Scan::kBad || start == std::string_view::npos) return s;
    call.arguments = std::string(text.substr(start, (s == Scan::kDone ? c.pos() : text.size()) - start));
    return s;
  };
  if (!is_object_call(f)) {
    std::string name;
    if (Scan s = c.name(&name); s != Scan::kDone) return s;
    if (const Scan id = *f.id_marker ? c.peek_literal(f.id_marker) : Scan::kBad; id == Scan::kPartial) {
      return id;
    } else if (id == Scan::kDone) {  // an id the model wrote: not kept
      c.literal(f.id_marker);
      std::string id;
      if (Scan s = c.name(&id); s != Scan::kDone) return s;
    }
    if (Scan s = c.literal(f.name_args_separator); s != Scan::kDone) return s;
    calls.push_back({name, ""});
    if (Scan s = arguments(calls.back()); s != Scan::kDone) return s;
  } else {
    if (Scan s = c.literal("{"); s != Scan::kDone) return s;
    bool named = false, argued = false;
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
      if (key == "name" && !named) {
        std::string name;
        if (Scan s = c.string(&name); s != Scan::kDone) return s;
        calls.push_back({name, ""});
        named = true;
      } else if (key == f.args_key && named && !argued) {
        if (Scan s = arguments(calls.back()); s != Scan::kDone) return s;
        argued = true;
      } else if (key == f.args_key) {
        return Scan::kBad;  // arguments before the name, or twice
      } else if (Scan s = c.skip_value(); s != Scan::kDone) {
        return s;
      }
    }
    if (!argued) return Scan::kBad;
  }
  return c.literal(f.call_end);
}

// The length of the longest end of `text` that begins `trigger` (and is shorter than it).
size_t held_back(std::string_view text, std::string_view trigger) {
  for (size_t n = std::min(text.size(), trigger.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == trigger.substr(0, n)) return n;
  return 0;
}

}  // namespace

std::string ToolCallFormat::trigger() const {
  const std::string opening = std::string(section_begin) + call_begin;
  return opening.empty() ? "{\"name\"" : opening;
}

std::vector<std::string> ToolCallFormat::literals() const {
  std::vector<std::string> out;
  for (const char* s : {section_begin, call_begin, name_args_separator, id_marker, call_end, between, section_end})
    if (*s) out.emplace_back(s);
  return out;
}

const std::vector<ToolCallFormat>& tool_call_formats() { return kFormats; }

std::string tool_call_format_list() {
  std::string names;
  for (const auto& f : kFormats) names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

const ToolCallFormat* detect_tool_call_format(const ChatTemplate& chat) {
  if (!chat.is_jinja()) return nullptr;
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get the current weather in a city.", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  const json messages = json::parse(R"([{"role": "user", "content": "What's the weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "call00001",
       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}])");
  std::string rendered;
  try {
    rendered = chat.render_json(messages, tools, false);
  } catch (const Error&) {
    return nullptr;  // the template refuses tool calls
  }
  for (const auto& f : kFormats) {
    const std::string call = spell_call_opening(f, "get_weather", "{\"city\": \"Paris\"}");
    const std::string with_id =  // Mistral's templates write the call's id before its arguments
        *f.id_marker ? f.call_begin + std::string("get_weather") + f.id_marker + "call00001" + f.name_args_separator +
                           "{\"city\": \"Paris\"}"
                     : call;
    for (const std::string& spelled : {call, with_id})
      if (rendered.find(f.section_begin + spelled) != std::string::npos) return &f;
  }
  return nullptr;
}

std::string tool_call_gbnf(const ToolCallFormat& f, const json& tools, const std::string& only, bool parallel) {
  KILN_CHECK(tools.is_array() && !tools.empty(), "tool_call_gbnf: no tools");
  std::string rules, calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& function = tools[i]["function"];
    const std::string name = function["name"];
    if (!only.empty() && name != only) continue;
    const json parameters = function.value("parameters", json{{"type", "object"}});
    const std::string prefix = "tool" + std::to_string(i) + "-";
    JsonSchemaRules args;
    try {
      args = json_schema_rules(parameters, prefix);
    } catch (const Error& e) {
      KILN_FAIL("tools[", i, "] (", name, ") parameters: ", e.what());
    }
    rules += args.rules;
    const std::string body = is_object_call(f)
                                 ? gbnf_literal("{\"name\": " + json(name).dump() + ", \"" + f.args_key + "\": ") +
                                       " " + args.top + " " + gbnf_literal("}")
                                 : gbnf_literal(name + f.name_args_separator) + " " + args.top;
    rules += prefix + "call ::= " + literal_or_nothing(f.call_begin) + " " + body + " " +
             literal_or_nothing(f.call_end) + "\n";
    calls += (calls.empty() ? "" : " | ") + prefix + "call";
  }
  KILN_CHECK(!calls.empty(), "no tool is named '", only, "'");
  std::string root = "root ::= " + literal_or_nothing(f.section_begin) + " call ";
  if (parallel) root += "( " + literal_or_nothing(f.between) + " call )* ";
  root += literal_or_nothing(f.section_end) + "\ncall ::= " + calls + "\n";
  return root + json_primitives_gbnf() + rules;
}

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
  out.grammar = std::make_shared<const Grammar>(
      parse_gbnf(tool_call_gbnf(f, tools, named ? choice.name : "", parallel && !named)));
  if (choice.mode == ToolChoice::Mode::kAuto) out.trigger = f.trigger();
  return out;
}

ToolAnswer read_tool_answer(const ToolCallFormat& f, std::string_view text, bool whole) {
  ToolAnswer answer;
  const std::string trigger = f.trigger();
  const size_t start = text.find(trigger);
  if (start == std::string_view::npos) {
    answer.content = std::string(text.substr(0, text.size() - (whole ? 0 : held_back(text, trigger))));
    return answer;
  }
  answer.content = std::string(text.substr(0, start));
  Cursor c(text, start);
  Scan s = c.literal(f.section_begin);
  for (bool first = true; s == Scan::kDone; first = false) {
    if (!first) {
      const Scan next = c.peek_literal(std::string(f.between) + f.call_begin);
      if (next != Scan::kDone || (!*f.between && !*f.call_begin)) {
        s = next == Scan::kPartial ? Scan::kPartial : Scan::kDone;
        break;
      }
      c.literal(f.between);
    }
    s = read_call(f, c, answer.calls, text);
    if (s != Scan::kDone) break;
  }
  // A section that is not the format's before its first call's name: the text is content.
  if (answer.calls.empty() && (s == Scan::kBad || whole)) answer.content = std::string(text);
  return answer;
}

std::string tool_call_id(const ToolCallFormat& f, uint64_t seed) {
  static const char* const digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const size_t length = f.id_length ? f.id_length : 24;
  std::string id = f.id_length ? "" : "call_";
  uint64_t x = seed;
  for (size_t i = 0; i < length; ++i) {
    x += 0x9E3779B97F4A7C15ull;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    id += digits[(z ^ (z >> 31)) % 62];
  }
  return id;
}

json tool_calls_json(const ToolCallFormat& f, const std::vector<ToolCall>& calls, uint64_t seed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i)
    out.push_back({{"id", tool_call_id(f, seed + i)},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  return out;
}

}  // namespace kiln::text
