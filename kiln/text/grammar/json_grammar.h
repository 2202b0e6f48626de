// The grammar of a JSON object (RFC 8259), what `response_format: {"type":
// "json_object"}` asks for: OpenAI's JSON mode answers with an object. It is
// the JSON Schema compiler's grammar for {"type": "object"} (json_schema.h),
// whose whitespace between tokens is bounded (one space, or a newline and up
// to 20 indentation characters, as llama.cpp's json.gbnf bounds it), so a
// model cannot fill its answer with blanks.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "kiln/text/grammar/gbnf.h"

namespace kiln::text {

std::shared_ptr<const Grammar> json_object_grammar();  // compiled once

// OpenAI's response_format: {"type": "text"} (null: no constraint),
// {"type": "json_object"} (the grammar above) or {"type": "json_schema",
// "json_schema": {"schema": ...}} (json_schema.h). Throws kiln::Error naming
// what is wrong.
std::shared_ptr<const Grammar> response_format_grammar(const nlohmann::ordered_json& format);

}  // namespace kiln::text
