// The tool-call formats Kiln knows, as a table (most specific first), and
// which of them a chat template spells its calls in.
#include "kiln/text/tool_calls.h"

#include <algorithm>
#include <optional>

#include "kiln/text/tool_call_probe.h"

namespace kiln::text {

namespace {

using json = nlohmann::ordered_json;

// name, section_begin, call_begin, args_key, name_args_separator, id_marker, call_end, between, section_end, id_length
// [, param_begin, param_name_end, param_end, param_name_end_json, builtin_begin, id_is_index, name_marker, announced];
// the later rows name their fields.
const std::vector<ToolCallFormat> kFormats = {
    // Qwen3-Coder, Qwen3.5, Nemotron 3, Step 3.5: XML-style parameters, each value on its own lines.
    {"qwen3-coder", "", "<tool_call>\n<function=", "", ">\n", "", "</function>\n</tool_call>", "\n", "", 0,
     "<parameter=", ">\n", "\n</parameter>\n"},
    {"seed-oss", "", "<seed:tool_call>\n<function=", "", ">\n", "", "</function>\n</seed:tool_call>", "\n", "", 0,
     "<parameter=", ">", "</parameter>\n"},
    {"glm-4.6", "", "<tool_call>", "", "\n", "", "</tool_call>", "\n", "", 0, "<arg_key>", "</arg_key>\n<arg_value>",
     "</arg_value>\n"},
    {"glm-4.7", "", "<tool_call>", "", "", "", "</tool_call>", "", "", 0, "<arg_key>", "</arg_key><arg_value>",
     "</arg_value>"},
    // DeepSeek V3.2 and V4 (DSML): each parameter says whether its value is text or JSON.
    {"deepseek-v3.2", "<｜DSML｜function_calls>\n", "<｜DSML｜invoke name=\"", "", "\">\n", "", "</｜DSML｜invoke>\n", "",
     "</｜DSML｜function_calls>", 0, "<｜DSML｜parameter name=\"", "\" string=\"true\">", "</｜DSML｜parameter>\n",
     "\" string=\"false\">"},
    {"deepseek-v4", "<｜DSML｜tool_calls>\n", "<｜DSML｜invoke name=\"", "", "\">\n", "", "</｜DSML｜invoke>\n", "",
     "</｜DSML｜tool_calls>", 0, "<｜DSML｜parameter name=\"", "\" string=\"true\">", "</｜DSML｜parameter>\n",
     "\" string=\"false\">"},
    {"minimax-m2", "<minimax:tool_call>\n", "<invoke name=\"", "", "\">\n", "", "</invoke>\n", "", "</minimax:tool_call>",
     0, "<parameter name=\"", "\">", "</parameter>\n"},
    // MiniMax M3: nested elements after its namespace token.
    {.name = "minimax-m3", .section_begin = "]<]minimax[>[<tool_call>\n", .call_begin = "]<]minimax[>[<invoke name=\"",
     .name_args_separator = "\">", .call_end = "]<]minimax[>[</invoke>\n", .section_end = "]<]minimax[>[</tool_call>",
     .element_prefix = "]<]minimax[>["},
    // Kimi K3: XML-style parameters, each naming its type, in <|open|>/<|close|> tags.
    {.name = "kimi-k3", .section_begin = "<|open|>tools<|sep|>", .call_begin = "<|open|>call tool=\"",
     .name_args_separator = "\"<|sep|>", .call_end = "<|close|>call<|sep|>", .section_end = "<|close|>tools<|sep|>",
     .param_begin = "<|open|>argument key=\"", .param_name_end = "\"<|sep|>", .param_end = "<|close|>argument<|sep|>",
     .index_marker = "\" index=\"", .param_type_marker = "\" type=\""},
    {.name = "minicpm5", .call_begin = "<function name=\"", .name_args_separator = "\">", .call_end = "</function>",
     .between = "\n", .param_begin = "<param name=\"", .param_name_end = "\">", .param_end = "</param>",
     .cdata_values = true},
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
    // DeepSeek R1 and its distills: the call's type, its name, then its arguments in a JSON code block.
    {.name = "deepseek-r1", .section_begin = "<｜tool▁calls▁begin｜>",
     .call_begin = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>", .name_args_separator = "\n```json\n", .call_end = "\n```<｜tool▁call▁end｜>", .between = "\n",
     .section_end = "<｜tool▁calls▁end｜>"},
    // MiniMax M1: one JSON object per line.
    {.name = "minimax-m1", .section_begin = "<tool_calls>\n", .args_key = "arguments", .between = "\n",
     .section_end = "\n</tool_calls>"},
    // Hunyuan (Hy3): GLM's parameters, in its own tags.
    {.name = "hunyuan", .section_begin = "<tool_calls:opensource>\n", .call_begin = "<tool_call:opensource>",
     .name_args_separator = "<tool_sep:opensource>\n", .call_end = "</tool_call:opensource>\n",
     .section_end = "</tool_calls:opensource>", .param_begin = "<arg_key:opensource>",
     .param_name_end = "</arg_key:opensource>\n<arg_value:opensource>", .param_end = "</arg_value:opensource>\n"},
    // Command R7B, Command A: a JSON list of {"tool_call_id", "tool_name", "parameters"}, one object a line.
    {.name = "command-r7b", .section_begin = "<|START_ACTION|>[\n    ", .args_key = "parameters",
     .between = ",\n    ", .section_end = "\n]<|END_ACTION|>", .name_key = "tool_name", .index_key = "tool_call_id"},
    {"apriel", "<tool_calls>[", "", "arguments", "", "", "", ", ", "]</tool_calls>", 0},
    {"nemotron-v2", "<TOOLCALL>[", "", "arguments", "", "", "", ", ", "]</TOOLCALL>", 0},
    // Granite 3.3: its template renders no calls; its system prompt asks for a JSON list after <|tool_call|>
    // (and the model writes each object's arguments before its name).
    {"granite-3.3", "<|tool_call|>[", "", "arguments", "", "", "", ", ", "]", 0, "", "", "", "", "", false, "",
     "<|tool_call|> followed by a JSON list"},
    {"gigachat3.1", "", "<|function_call|>", "arguments", "", "", "", "", "", 0},
    // GigaChat 3: one call, a message of the "function call" role after the assistant's.
    {.name = "gigachat3", .section_begin = "<|message_sep|>\n\nfunction call<|role_sep|>\n", .args_key = "arguments"},
    {"functionary-v3.1", "", "<function=", "", ">", "", "</function>", "", "", 0},
    // Functionary 3.2: >>>RECIPIENT, a line break, then the content (recipient "all") or a call's JSON arguments.
    {.name = "functionary-v3.2", .call_begin = ">>>", .name_args_separator = "\n", .content_recipient = "all\n"},
    // Firefunction v2: functools, then a JSON list of calls.
    {"firefunction-v2", "functools[", "", "arguments", "", "", "", ", ", "]", 0},
    // Kimi K2 (read in moonshotai's template; Instruct and Thinking answer the same way): functions.NAME:INDEX,
    // then the JSON arguments.
    {"kimi-k2", "<|tool_calls_section_begin|>", "<|tool_call_begin|>functions.", "", "<|tool_call_argument_begin|>",
     ":", "<|tool_call_end|>", "", "<|tool_calls_section_end|>", 0, "", "", "", "", "", true},
    // Solar Open: <|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}<|tool_call:end|> per call.
    {"solar-open", "<|tool_calls|>", "<|tool_call:begin|>", "", "<|tool_call:args|>", "", "<|tool_call:end|>", "",
     "<|calls|>", 10, "", "", "", "", "", false, "<|tool_call:name|>"},
    // Apertus: a JSON list of {"NAME": ARGUMENTS}.
    {"apertus", "<|tools_prefix|>[", "{\"", "", "\": ", "", "}", ", ", "]<|tools_suffix|>", 0},
    // LFM2, LFM2.5: a Python list of calls, NAME(KEY=VALUE, ...). LFM2's and LFM2.5-Instruct's templates render
    // no calls; they list the tools in the system prompt so.
    {.name = "lfm2", .section_begin = "<|tool_call_start|>[", .name_args_separator = "(", .call_end = ")",
     .between = ", ", .section_end = "]<|tool_call_end|>", .announced = "List of tools: ", .keyword_arguments = true},
    // Gemma 4: NAME{KEY:VALUE,...}, values in its notation.
    {.name = "gemma-4", .call_begin = "<|tool_call>call:", .name_args_separator = "{", .call_end = "}<tool_call|>",
     .keyword_arguments = true, .keyword_assign = ":", .notation = &kGemmaNotation},
    // muse-glimmer: a message to the tool per call, its parameters in an <atem:invoke> naming it again.
    {.name = "muse-glimmer", .call_begin = " to=",
     .name_args_separator = "<|message|><atem:function_calls>\n<atem:invoke name=\"",
     .call_end = "</atem:invoke>\n</atem:function_calls>", .between = "<|eom|><|start|>assistant",
     .param_begin = "<atem:parameter name=\"", .param_name_end = "\">", .param_end = "</atem:parameter>\n",
     .name_repeat_end = "\">\n", .opening_names_the_tool = true},
    // gpt-oss (harmony): to=functions.NAME, then the JSON arguments after <|message|>, in the commentary channel.
    {.name = "harmony", .call_begin = "<|channel|>commentary to=functions.",
     .name_args_separator = " <|constrain|>json<|message|>", .call_end = "<|call|>", .call_begin_alt = " to=functions.",
     .args_after = "<|message|>", .name_args_separator_alt = "<|channel|>commentary json<|message|>",
     .probe_rendered = "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": "
                       "\"Paris\"}<|call|>"},
    // Llama 3.1, 3.2, 3.3: a bare JSON object, its arguments under "parameters".
    {"llama3-json", "", "", "parameters", "", "", "", "; ", "", 0, "", "", "", "", "<|python_tag|>"},
};

// The text of one call, as the format spells it (the object's closing brace
// left off: templates may write more keys after the arguments).
std::string spell_call_opening(const ToolCallFormat& f, const std::string& name, const std::string& arguments) {
  if (f.has_parameters()) {  // arguments {"city": "Paris"} as the probe's one parameter (Kimi K3's: its index 1)
    const std::string index = *f.index_marker ? f.index_marker + std::string("1") : "";
    const std::string type = *f.param_type_marker ? f.param_type_marker + std::string("string") : "";
    const std::string again = *f.name_repeat_end ? name + f.name_repeat_end : "";
    return f.call_begin + name + index + f.name_args_separator + again + f.param_begin + "city" + type +
           f.param_name_end + "Paris" + f.param_end;
  }
  if (f.keyword_arguments)
    return f.call_begin + name + f.name_args_separator + "city" + f.keyword_assign +
           (f.notation->bare_keys ? spell_value("Paris", *f.notation) : "'Paris'");
  if (*f.element_prefix)
    return f.call_begin + name + f.name_args_separator + f.element_prefix + "<city>Paris" + f.element_prefix +
           "</city>";
  if (!f.is_object_call()) return f.call_begin + name + f.name_args_separator + arguments;
  return f.call_begin + f.object_call_opening(name, "0") + arguments;
}

}  // namespace

bool ToolCallFormat::is_builtin(std::string_view tool) const {
  return *builtin_begin && std::any_of(std::begin(kBuiltinTools), std::end(kBuiltinTools),
                                       [&](const char* b) { return tool == b; });
}

std::string ToolCallFormat::object_call_opening(const std::string& name, const std::string& index) const {
  const std::string indexed = *index_key ? "\"" + std::string(index_key) + "\": \"" + index + "\", " : "";
  return "{" + indexed + "\"" + name_key + "\": " + json(name).dump() + ", \"" + args_key + "\": ";
}

std::vector<std::string> ToolCallFormat::openings(const json& tools) const {
  if (opening_names_the_tool) {
    std::vector<std::string> out;
    if (tools.is_array())
      for (const json& tool : tools)
        if (tool.is_object() && tool.contains("function") && tool["function"].is_object() &&
            tool["function"].contains("name") && tool["function"]["name"].is_string())
          out.push_back(std::string(section_begin) + call_begin + tool["function"]["name"].get<std::string>() +
                        name_args_separator);
    return out;
  }
  const std::string opening = std::string(section_begin) + call_begin;
  std::vector<std::string> out = {opening.empty() ? "{\"" + std::string(name_key) + "\"" : opening};
  if (*call_begin_alt) out.push_back(section_begin + std::string(call_begin_alt));
  return out;
}

std::vector<std::string> ToolCallFormat::literals() const {
  std::vector<std::string> out;
  for (const char* s : {section_begin, call_begin, name_args_separator, id_marker, call_end, between, section_end,
                        param_begin, param_name_end, param_end, builtin_begin, name_marker, element_prefix,
                        index_marker, param_type_marker, call_begin_alt, args_after})
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
  const json messages = tool_call_probe_messages(takes_text_arguments(chat));
  const std::optional<std::string> probe = rendered_tool_call_probe(chat, messages, false);
  if (!probe) return nullptr;  // the template refuses tool calls
  const std::string& rendered = *probe;
  for (const auto& f : kFormats) {
    if (*f.probe_rendered) {
      if (rendered.find(f.probe_rendered) != std::string::npos) return &f;
      continue;
    }
    const std::string call = spell_call_opening(f, "get_weather", "{\"city\": \"Paris\"}");
    // Mistral's templates write the call's id before its arguments, Kimi's its index, Solar's the id before the name.
    std::string with_id = call;
    if (*f.id_marker)
      with_id = f.call_begin + std::string("get_weather") + f.id_marker + (f.id_is_index ? "0" : "call00001") +
                f.name_args_separator + "{\"city\": \"Paris\"}";
    else if (*f.name_marker)
      with_id = f.call_begin + std::string("call00001") + f.name_marker + "get_weather" + f.name_args_separator +
                "{\"city\": \"Paris\"}";
    for (const std::string& spelled : {call, with_id})
      if (rendered.find(f.section_begin + spelled) != std::string::npos) return &f;
  }
  const std::optional<std::string> asked = rendered_tool_call_probe(chat, json::array({messages[0]}), true);
  if (!asked) return nullptr;
  for (const auto& f : kFormats)
    if (*f.announced && asked->find(f.announced) != std::string::npos) return &f;
  return nullptr;
}

}  // namespace kiln::text
