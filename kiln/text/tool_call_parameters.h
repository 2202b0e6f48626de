// Tool-call parameters written one by one: XML-style (ToolCallFormat::
// param_begin: Qwen3-Coder, Qwen3.5, Nemotron 3, Seed-OSS, MiniCPM5) and
// Python keyword arguments (LFM2). Which values are written as raw text,
// how a written value reads back as JSON (as vLLM's qwen3_coder parser
// reads it: by the parameter's type), and the grammar of a call's
// parameters, so that a forced call always reads back valid.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kiln/text/tool_calls.h"

namespace kiln::text {

// The schema of parameter `key` among a function's `parameters` (a $ref
// into their $defs followed, the $defs carried along); null when the
// parameters name no such key.
nlohmann::ordered_json parameter_schema(const nlohmann::ordered_json& parameters, const std::string& key);

// Whether a parameter's value is written as raw text (a string's: its type
// is string, or it is an enum or const of strings) rather than as JSON. A
// parameter without a schema is text.
bool parameter_is_text(const nlohmann::ordered_json& schema);

// JSON text for a written value: a text parameter's as a JSON string; any
// other's as written when it is JSON (True and False taken for booleans, as
// templates' `| string` spells them), else as a JSON string.
std::string parameter_value_json(const nlohmann::ordered_json& schema, std::string_view value);

// A JSON string's contents for `text`, escaped a byte at a time (so the
// escape of a prefix is a prefix of the escape); other bytes as they are.
std::string json_escaped(std::string_view text);

// GBNF for a call's parameters, in the schema's order (required ones
// always, optional ones at most once), its rules added to `rules` under
// names starting with `prefix`. Text values are raw text without '<'
// followed by '/' (so none can hold its closing tag), or the schema's
// enum, pattern, format or length; others are the schema's JSON. Throws
// kiln::Error for a schema the compilers refuse.
std::string parameters_gbnf(const ToolCallFormat& format, const nlohmann::ordered_json& parameters,
                            const std::string& prefix, std::string& rules);

// A text value's grammar (a string parameter's raw text): its enum or
// const, pattern (no '<' in it), format, or length (a repetition of
// `one_char`), else `any_text`.
std::string text_value_gbnf(const nlohmann::ordered_json& schema, const std::string& any_text,
                            const std::string& one_char);

// A schema's bounds (`min_key`, `max_key`: minItems/maxItems...) as a GBNF
// repetition ("{2,8}"), or "" when it has neither; throws kiln::Error for
// bad values.
std::string repetition(const nlohmann::ordered_json& schema, const char* min_key, const char* max_key);
// A string schema's minLength/maxLength so.
std::string length_repetition(const nlohmann::ordered_json& schema);

// A rule name's part for a parameter key (GBNF names: letters, digits, '-').
std::string rule_name_part(const std::string& key);

// GBNF for keyword arguments (ToolCallFormat::keyword_arguments: LFM2's
// Python KEY=VALUE, ..., Gemma 4's KEY:VALUE,...), in the schema's order
// (required ones always, optional ones at most once), each value what its
// schema takes in the format's notation (JSON's strings, numbers, lists and
// objects are Python's too); rules added as parameters_gbnf's are.
std::string keyword_arguments_gbnf(const ToolCallFormat& format, const nlohmann::ordered_json& parameters,
                                   const std::string& prefix, std::string& rules);

// The rules parameters_gbnf's expressions use, once per grammar.
const char* parameter_text_rules(const ToolCallFormat& format);

}  // namespace kiln::text
