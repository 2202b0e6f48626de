// Tool calls in a model's output: how each family spells them, which one a
// chat template uses (found by rendering a call through the template, not
// by recognising the template), the grammar that forces a valid call, and
// a parser that reads calls out of the text as it grows, so that a stream
// and a whole answer read the same calls.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/text/chat_template.h"
#include "kiln/text/grammar/gbnf.h"
#include "kiln/text/grammar/json_schema.h"

namespace kiln::text {

// How a family spells the tool calls of one assistant turn: a section of
// one or more calls. A call is a JSON object {"name": NAME, args_key:
// ARGUMENTS} when name_args_separator is empty, else NAME separator
// ARGUMENTS, where ARGUMENTS is a JSON object or, when param_begin is set,
// XML-style parameters (Qwen3-Coder, Qwen3.5, Nemotron 3, Seed-OSS): per
// parameter, param_begin KEY param_name_end VALUE param_end, the value raw
// text for a string parameter and JSON for any other (read back into a
// JSON object by the parameters' schema: tool_call_parameters.h). Reading,
// whitespace may come before each literal and a literal's own whitespace
// matches any run of it (a value's text is taken exactly, less the one
// line break the format puts on each side); the grammar spells the
// literals exactly.
struct ToolCallFormat {
  const char* name = "";
  const char* section_begin = "";  // before the first call
  const char* call_begin = "";     // before each call
  const char* args_key = "";       // the JSON object's key for the arguments
  const char* name_args_separator = "";
  // NAME id_marker ID separator ARGUMENTS: a call id the model may write (Mistral's [CALL_ID]).
  const char* id_marker = "";
  const char* call_end = "";
  const char* between = "";  // between two calls
  const char* section_end = "";
  size_t id_length = 0;  // the ids the template accepts: 0 for OpenAI's "call_...", else that many letters and digits
  const char* param_begin = "";
  const char* param_name_end = "";
  const char* param_end = "";
  // DeepSeek V3.2/V4 mark each parameter's kind: param_name_end ends a text
  // parameter's name, this one a JSON parameter's (string="false").
  const char* param_name_end_json = "";
  // Llama 3.1+: a call may also open with this ("<|python_tag|>"), then be
  // a JSON call, a built-in tool's NAME.call(KEY="VALUE", ...) (brave_search,
  // wolfram_alpha) or code_interpreter's Python code.
  const char* builtin_begin = "";
  // Kimi K2: the id after id_marker is the call's index in the
  // conversation (functions.NAME:0, functions.NAME:1...), which the template
  // and the model write themselves; the grammar asks for digits there.
  bool id_is_index = false;
  // Solar Open: call_begin ID name_marker NAME: the model writes the call's
  // id (id_length lowercase letters and digits) before its name, and the
  // template takes that id back for the call's result.
  const char* name_marker = "";
  // Granite 3.3: a template that renders no assistant's calls but tells the
  // model, in the prompt it renders for tools, how to write them; this is
  // that telling's text.
  const char* announced = "";
  // LFM2: ARGUMENTS are Python keyword arguments, KEY=VALUE, ... (values
  // Python literals: python_literal.h), up to call_end's ")".
  bool keyword_arguments = false;
  // MiniCPM5: an XML-style text value may be wrapped in <![CDATA[...]]>
  // (its template wraps those holding '<', '&' or a line break).
  bool cdata_values = false;
  // MiniMax M3: ARGUMENTS are nested elements, PREFIX<KEY>VALUE PREFIX</KEY>
  // each (tool_call_elements.h).
  const char* element_prefix = "";
  // Kimi K3: NAME index_marker INDEX separator: the model writes the call's
  // index (digits) there, which is read and dropped.
  const char* index_marker = "";
  // Kimi K3: KEY param_type_marker TYPE param_name_end: each parameter
  // names its JSON type; "string" marks raw text, any other JSON.
  const char* param_type_marker = "";
  // gpt-oss (harmony): a call may also open so (the recipient in the role,
  // as its template writes calls, rather than in the channel), and its
  // arguments follow args_after, whatever comes between the name and it
  // (the content type: " <|constrain|>json", "<|channel|>commentary json").
  const char* call_begin_alt = "";
  const char* args_after = "";
  // What the grammar writes between the name and the arguments after
  // call_begin_alt (harmony's role spelling: "<|channel|>commentary json<|message|>").
  const char* name_args_separator_alt = "";
  // The probe's call as the template renders it, where the format reads
  // more spellings than that one (harmony's).
  const char* probe_rendered = "";
  // The JSON object's key for the name (Command R7B's "tool_name"), and
  // the key of a call index (digits in a string) the model writes before
  // it (Command R7B's "tool_call_id": its template numbers calls itself,
  // so the index is read and dropped).
  const char* name_key = "name";
  const char* index_key = "";
  // Gemma 4: keyword arguments (keyword_arguments) KEY:VALUE up to
  // call_end's "}", the values in its notation (strings raw between <|"|>
  // marks, keys bare: python_literal.h reads them, json_schema.h's
  // kGemmaNotation writes them).
  const char* keyword_assign = "=";
  const ValueNotation* notation = &kJsonNotation;
  // Functionary 3.2: the answer is a list of messages, call_begin RECIPIENT
  // separator BODY each, the first one's call_begin written by the
  // generation prompt (">>>"). This recipient ("all", with its separator)
  // marks the answer's content, which runs to the next call_begin; any
  // other names a function, the body its JSON arguments.
  const char* content_recipient = "";
  // muse-glimmer: the name is written twice, after call_begin (the
  // message's recipient) and again after name_args_separator (its
  // invoke's), then this.
  const char* name_repeat_end = "";
  // muse-glimmer: call_begin opens its content's and reasoning's messages
  // too (" to=user", " to=self"), so a call opens with call_begin, an
  // offered tool's name and name_args_separator.
  bool opening_names_the_tool = false;

  // What starts a section in the output (from the first, the text is
  // calls): the section's opening, in each of the format's spellings, and
  // for each of `tools` where the opening names the tool.
  std::vector<std::string> openings(const nlohmann::ordered_json& tools) const;
  // Every literal of the format (special tokens in them are kept as text).
  std::vector<std::string> literals() const;

  // XML-style parameters (param_begin) rather than JSON arguments.
  bool has_parameters() const { return *param_begin != 0; }
  // A bare JSON object holding the name and the arguments.
  bool is_object_call() const { return *name_args_separator == 0 && !has_parameters(); }
  // Whether `tool` is one of kBuiltinTools, called after builtin_begin (where the format has one).
  bool is_builtin(std::string_view tool) const;
  // An object call up to its arguments: {"name": NAME, "arguments": (or its
  // index first, then the format's keys).
  std::string object_call_opening(const std::string& name, const std::string& index) const;
};

// The tools Llama 3.1's templates name built-in, in their order: called as
// NAME.call(KEY="VALUE", ...) after <|python_tag|>, or (code_interpreter)
// with Python code after it.
inline constexpr const char* kBuiltinTools[] = {"brave_search", "wolfram_alpha", "code_interpreter"};

// The known formats, most specific first.
const std::vector<ToolCallFormat>& tool_call_formats();
// "hermes, mistral, ..." for messages.
std::string tool_call_format_list();
// The format `chat` spells an assistant's tool call in, found by rendering
// one (or, for a template that renders no calls, by the prompt it renders
// for tools announcing one); null when it spells none of the known ones (or
// takes no tools).
const ToolCallFormat* detect_tool_call_format(const ChatTemplate& chat);

// GBNF for a section of calls to `tools` (OpenAI's list of {"type":
// "function", "function": {"name", "parameters"}}), each call's arguments
// valid under its function's parameters; only the function named `only`
// when it is not empty, and one call unless `parallel`. `triggered`: the
// grammar applies from the section's opening in the answer (tool_choice
// auto), else from the answer's start, after what the prompt wrote of it
// (Functionary 3.2's first call_begin). Throws kiln::Error for a schema
// the compiler refuses.
std::string tool_call_gbnf(const ToolCallFormat& format, const nlohmann::ordered_json& tools, const std::string& only,
                           bool parallel, bool triggered = false);

// How `chat` takes a call's arguments: as the object they stand for (most
// templates write it with tojson), or as the JSON text the chat API
// carries (Functionary 3.2 concatenates it, and fails on an object). Found
// by rendering a call both ways, as llama.cpp finds its templates'
// capabilities.
bool takes_text_arguments(const ChatTemplate& chat);
// `messages` with each call's arguments as the template takes them: an
// object's JSON text parsed into it (other text stays as sent), or
// (`text`) an object written as json.dumps writes it.
nlohmann::ordered_json arguments_as_taken(const nlohmann::ordered_json& messages, bool text);
// The variables that llama-server and model cards pass to templates besides
// transformers' own, for the templates that read them (Firefunction v2
// fails without both): `functions`, the tools as JSON text (its model
// card's json.dumps(functions, indent=4)), and `datetime`, today as
// llama-server writes it ("Nov 29 2026", by the template's clock).
nlohmann::ordered_json serving_variables(const ChatTemplate& chat, const nlohmann::ordered_json& tools);

// `answer` (a response_format's grammar: the answer's content) after the
// format's content recipient, which marks content in its answers
// (Functionary 3.2's "all\n"): the model names the recipient first, as
// its template teaches it.
Grammar grammar_after_content_recipient(const ToolCallFormat& format, const Grammar& answer);

// OpenAI's tool_choice: none (the tools are shown, no call is read), auto
// (the model may call), required (it must call one or more), or one
// function by name (it must call that one).
struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kNamed } mode = Mode::kAuto;
  std::string name;  // kNamed's function
};
// tool_choice as the API spells it ("none", "auto", "required" or
// {"type": "function", "function": {"name"}}), checked against `tools`
// (null: none given; then the choice must be absent or "none"). Throws
// kiln::Error saying what is wrong.
ToolChoice tool_choice_from_json(const nlohmann::ordered_json& choice, const nlohmann::ordered_json& tools);

// What constrains an answer that may call tools: the grammar (null for
// tool_choice none) and, for auto, the triggers from the first of which it
// applies (a format's spellings of a call's opening: harmony has two).
struct ToolConstraint {
  std::shared_ptr<const Grammar> grammar;
  std::vector<std::string> triggers;
};
ToolConstraint tool_call_constraint(const ToolCallFormat& format, const nlohmann::ordered_json& tools,
                                    const ToolChoice& choice, bool parallel);

struct ToolCall {
  std::string name;
  std::string arguments;  // the model's JSON text, as written (all of it so far, while the call is open)
  std::string id{};       // the id the model wrote, where the format's template takes that one back (Kimi's)
};

// An answer read so far: the content before the calls, and the calls whose
// names are whole. Reading a longer text of the same answer only extends
// these (content and each call's arguments grow, calls are added), so a
// stream can send the differences.
struct ToolAnswer {
  std::string content;
  std::vector<ToolCall> calls;
};

// Reads `text`, an answer so far (`whole`: all of it), a reply to a request
// that offered `tools` (their parameters' types say how XML-style values
// read; with none, an answer in a format with a content recipient is all
// content). Text that may still become a section's start is held back until
// it is known. A section whose first call is not the format's is content
// after all (and so is the rest of the answer); what follows the calls, or
// breaks off a later call, is dropped.
ToolAnswer read_tool_answer(const ToolCallFormat& format, std::string_view text, bool whole,
                            const nlohmann::ordered_json& tools);

// The offered tools the format's template takes as built-in (its
// `builtin_tools` variable: Llama 3.1's brave_search, wolfram_alpha and
// code_interpreter), as llama-server passes them; empty for other formats.
nlohmann::ordered_json builtin_tools(const ToolCallFormat& format, const nlohmann::ordered_json& tools);

// A call's id, as the template will accept it back: the one the model
// wrote (Kimi's functions.NAME:INDEX, Solar's), else one `seed` picks.
std::string tool_call_id(const ToolCallFormat& format, const ToolCall& call, uint64_t seed);
// OpenAI's message.tool_calls for `calls`, ids picked from `seed`.
nlohmann::ordered_json tool_calls_json(const ToolCallFormat& format, const std::vector<ToolCall>& calls, uint64_t seed);

}  // namespace kiln::text
