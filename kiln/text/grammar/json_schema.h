// JSON Schema compiled to a GBNF grammar (gbnf.h), so that constrained
// decoding can only produce documents the schema accepts: what OpenAI's
// response_format json_schema and llama-server's json_schema ask for.
//
// Honoured: type (one or a list), enum, const, anyOf / oneOf (as anyOf: a
// grammar cannot forbid two branches matching), $ref to #/$defs/... and
// #/definitions/... (recursion included), objects' properties, required and
// additionalProperties (false, or a schema for the values of other keys),
// arrays' items, minItems and maxItems, strings' minLength and maxLength.
// Properties come in the schema's order (read it as ordered_json), required
// ones first (as llama.cpp orders them); an object with `properties` takes no other keys unless
// additionalProperties says so. Annotations (title, description, default,
// examples, format...) change nothing. Every other keyword that constrains
// (pattern, minimum, maximum, multipleOf, uniqueItems, prefixItems, allOf,
// not, if...) is refused by name rather than silently ignored.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/text/grammar/gbnf.h"

namespace kiln::text {

// GBNF text whose root matches exactly the JSON documents the grammar
// allows; throws kiln::Error naming the keyword and where it is.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);

}  // namespace kiln::text
