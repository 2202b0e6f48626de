// The grammar of a JSON object (RFC 8259), what `response_format: {"type":
// "json_object"}` asks for: OpenAI's JSON mode answers with an object.
// Whitespace between tokens is bounded (one space, or a newline and up to 20
// indentation characters, as llama.cpp's json.gbnf bounds it), so a model
// cannot fill its answer with blanks.
#pragma once
#include <memory>

#include "kiln/text/grammar/gbnf.h"

namespace kiln::text {

const char* json_object_gbnf();
std::shared_ptr<const Grammar> json_object_grammar();  // parsed once

}  // namespace kiln::text
