// JSON Schema compiled to a GBNF grammar (gbnf.h), so that constrained
// decoding can only produce documents the schema accepts: what OpenAI's
// response_format json_schema and llama-server's json_schema ask for.
//
// Honoured: type (one or a list), enum, const, anyOf / oneOf (as anyOf: a
// grammar cannot forbid two branches matching), allOf of one schema, $ref
// to #/$defs/... and #/definitions/... (recursion included), objects'
// properties, required and additionalProperties (false, or a schema for
// the values of other keys), arrays' prefixItems, items (a schema or
// false), minItems and maxItems, strings' minLength, maxLength, pattern
// (regex_gbnf.h) and the formats date, time, date-time and uuid, numbers'
// and integers' minimum, maximum and their exclusive forms, and multipleOf
// without them (json_number_gbnf.h). Properties come in the schema's order (read it as
// ordered_json), required ones first (as llama.cpp orders them); an object
// with `properties` takes no other keys unless additionalProperties says
// so. Annotations (title, description, default, examples, other formats...)
// change nothing. Every other keyword that constrains (uniqueItems,
// minProperties, not, if...) is refused by name rather than silently
// ignored.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <set>
#include <string_view>
#include <vector>

#include "kiln/text/grammar/gbnf.h"

namespace kiln::text {

// GBNF text whose root matches exactly the JSON documents the grammar
// allows; throws kiln::Error naming the keyword and where it is.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);

// The pieces, for grammars that hold JSON documents among other text (a
// tool call's arguments): the rules of `schema`'s documents, each named
// starting with `prefix` (several schemas can share a grammar), and `top`,
// the expression that matches a document. They refer to the JSON
// primitives (ws, json-value, json-string...), which json_primitives_gbnf
// defines once per grammar.
struct JsonSchemaRules {
  std::string top, rules;
};

// How the documents are spelled: JSON, or a family's notation of the same
// values (Gemma 4's tool calls: a string's text raw between <|"|> marks,
// an object's keys bare, KEY:VALUE, in sorted order as its template's
// dictsort writes them, and no whitespace between tokens).
struct ValueNotation {
  const char* string_quote;  // around a string's text: JSON's escaped text, or raw text that cannot hold it
  bool bare_keys;            // KEY:VALUE rather than "KEY": VALUE
  bool spaced;               // whitespace (ws) allowed between tokens
  const char* rule_prefix;   // its primitives' rule names: value, string, object, array, char (a string's)
  bool sorted_keys;          // an object's keys in Jinja's dictsort order, else required ones first, as given
};
extern const ValueNotation kJsonNotation, kGemmaNotation;

JsonSchemaRules json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix,
                                  const ValueNotation& notation = kJsonNotation);
const char* json_primitives_gbnf();
// The primitives of Gemma's notation (after json_primitives_gbnf: numbers,
// booleans and null are JSON's).
std::string gemma_primitives_gbnf();
// The keys of `properties` in the order the notation writes them.
std::vector<std::string> key_order(const nlohmann::ordered_json& properties, const std::set<std::string>& required,
                                   const ValueNotation& notation);
// GBNF for members written in this order, each required one always and each
// optional one at most once, `separator` between two written; its rules go
// through `add_rule(name, body)`, which returns the rule's name. The
// expression matches nothing but "" when no member is required.
struct OrderedMember {
  std::string gbnf;
  bool required;
};
std::string ordered_members_gbnf(const std::vector<OrderedMember>& members, const std::string& separator,
                                 const std::string& name,
                                 const std::function<std::string(const std::string&, const std::string&)>& add_rule);
// Whether a notation with bare keys can write `key`: letters, digits and these.
constexpr std::string_view kBareKeyPunctuation = "_$.-";
bool is_bare_key(std::string_view key);
// A value spelled in `notation` (the const and enum values of a schema);
// throws kiln::Error for a string that holds the notation's raw quote.
std::string spell_value(const nlohmann::ordered_json& value, const ValueNotation& notation);
// The GBNF of a string `format`'s characters (date, time, date-time, uuid),
// or "" for a format that only annotates.
std::string string_format_gbnf(const nlohmann::ordered_json& format);
// A GBNF literal that spells `text` exactly.
std::string gbnf_literal(const std::string& text);

}  // namespace kiln::text
