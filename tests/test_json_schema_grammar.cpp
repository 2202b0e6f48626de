// JSON Schema compiled to a grammar (kiln/text/grammar/json_schema.h): for a
// suite of schemas, documents the schema accepts are matched and documents it
// rejects are not (the answers `jsonschema` gives, written beside each); the
// keywords Kiln cannot honour are refused by name. tests/cli/hf_grammar.sh
// samples a model under the same schemas and validates with `jsonschema`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/text/grammar/json_schema.h"
#include "kiln/text/grammar/matcher.h"

namespace kiln::text {
namespace {

using json = nlohmann::ordered_json;

bool matches(const std::shared_ptr<const Grammar>& g, const std::string& doc) {
  GrammarMatcher m(g);
  return m.accept(doc) && m.can_end();
}

struct SchemaCase {
  const char* name;
  const char* schema;
  std::vector<const char*> valid, invalid;
};

TEST(JsonSchemaGrammar, MatchesWhatTheSchemaAccepts) {
  const std::vector<SchemaCase> cases = {
      {"enum and const", R"({"type": "object", "properties": {"mood": {"enum": ["happy", "sad", 3, null]},
         "v": {"const": "1.0"}}, "required": ["mood", "v"], "additionalProperties": false})",
       {R"({"mood": "happy", "v": "1.0"})", R"({ "mood": 3, "v": "1.0" })", R"({"mood": null,"v":"1.0"})"},
       {R"({"mood": "angry", "v": "1.0"})", R"({"v": "1.0", "mood": "sad"})", R"({"mood": "sad"})",
        R"({"mood": "sad", "v": "1.0", "x": 1})"}},
      {"optional properties", R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
         "c": {"type": "boolean"}}, "required": ["b"]})",
       {R"({"b": "x"})", R"({"b": "x", "a": 1})", R"({"b": "x", "c": true})", R"({"b": "x", "a": -2, "c": false})"},
       {R"({})", R"({"a": 1})", R"({"b": "x", "a": 1.5})", R"({"b": "x", "c": true, "a": 1})", R"({"b": "x",})"}},
      {"only optional", R"({"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "number"}}})",
       {R"({})", R"({"a": null})", R"({"b": 2.5e3})", R"({"a": null, "b": 0})"},
       {R"({,})", R"({"b": 1, "a": null})", R"({"c": 1})"}},
      {"arrays", R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
       {"[1]", "[1, 2, 3]", "[ -4 ]"}, {"[]", "[1, 2, 3, 4]", "[1.5]", "[\"1\"]"}},
      {"strings", R"({"type": "string", "minLength": 2, "maxLength": 4})", {R"("ab")", R"("a\"cd")", R"("é日本")"},
       {R"("a")", R"("abcde")", "abc"}},
      {"type lists and anyOf", R"({"anyOf": [{"type": ["integer", "null"]}, {"type": "array", "maxItems": 0}]})",
       {"7", "null", "[]"}, {"1.5", "[1]", "\"x\""}},
      {"$ref and recursion", R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
         "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
         "$ref": "#/$defs/node"})",
       {R"({"v": 1, "next": null})", R"({"v": 1, "next": {"v": 2, "next": {"v": 3, "next": null}}})"},
       {R"({"v": 1})", R"({"v": 1, "next": {"v": 2}})"}},
      {"additional properties as a schema", R"({"type": "object", "properties": {"id": {"type": "integer"}},
         "required": ["id"], "additionalProperties": {"type": "boolean"}})",
       {R"({"id": 1})", R"({"id": 1, "x": true, "y": false})"}, {R"({"id": 1, "x": 1})"}},
      {"any object", R"({"type": "object"})", {"{}", R"({"a": [1, {"b": null}]})"}, {"[]", "1"}},
      {"pattern", R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}(x|y+)?$"})",
       {R"("AB-123")", R"("ZZ-0000y")", R"("AB-123x")", R"("AB-123yyy")"},
       {R"("ab-123")", R"("AB-12")", R"("AB-12345")", R"("AB-123z")", R"("AB-123xy")"}},
      {"pattern with escapes, classes and dots", R"({"type": "string", "pattern": "^\\w+@[^@\\s\"]+\\.(com|org)$"})",
       {R"("a_1@x.com")", R"("me@dom-ain.org")"}, {R"("@x.com")", R"("a@b@c.com")", R"("a@x.net")", R"("a b@x.com")"}},
      {"pattern with a quote", R"({"type": "string", "pattern": "^say \"(hi|yo)\"\\.?$"})",
       {R"("say \"hi\"")", R"("say \"yo\".")"}, {R"("say hi")", R"("say \"hey\"")", R"("say "hi"")"}},
      {"annotations change nothing", R"({"title": "T", "description": "d", "type": "string", "format": "date-time",
         "default": "x", "examples": ["y"]})", {R"("anything")"}, {"1"}},
  };
  for (const SchemaCase& c : cases) {
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = json_schema_grammar(json::parse(c.schema))) << c.name;
    for (const char* doc : c.valid) EXPECT_TRUE(matches(g, doc)) << c.name << ": " << doc << " is valid";
    for (const char* doc : c.invalid) EXPECT_FALSE(matches(g, doc)) << c.name << ": " << doc << " is not valid";
  }
}

TEST(JsonSchemaGrammar, RefusesWhatItCannotHonourByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "string", "pattern": "a+"})", "must start with ^ and end with $"},
      {R"({"type": "string", "pattern": "^(a)\\1$"})", "backreference"},
      {R"({"type": "string", "pattern": "^(?=a)a$"})", "lookaround"},
      {R"({"type": "string", "pattern": "^\\bx$"})", "word boundary"},
      {R"({"type": "string", "pattern": "^[a$"})", "unclosed '['"},
      {R"({"type": "string", "pattern": "^a{2,1}$"})", "maximum is below its minimum"},
      {R"({"type": "string", "pattern": "^a{5000}$"})", "more than 1000 times"},
      {R"({"type": "string", "pattern": "^\\u00\u00e9$"})", "without its hex digits"},
      {R"({"type": "string", "pattern": "^a$", "maxLength": 3})", "put the length in the pattern"},
      {R"({"pattern": "^a$"})", "need \"type\": \"string\""},
      {R"({"type": "integer", "minimum": 0})", "'minimum' is not supported"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems' is not supported"},
      {R"({"allOf": [{"type": "string"}]})", "'allOf' is not supported"},
      {R"({"$ref": "#/$defs/missing"})", "is not a definition"},
      {R"({"$ref": "https://example.com/s.json"})", "is not a definition"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "not among the properties"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "maxItems is below minItems"},
      {R"({"type": "string", "maxLength": 100000})", "'maxLength' must be an integer"},
      {R"({"type": "wizard"})", "unknown type 'wizard'"},
      {R"({"enum": []})", "must be a non-empty array"},
      {R"(false)", "allows no document"},
      {R"(42)", "must be an object or a boolean"},
      // Recursion without a way out: no finite document (a model would write until its token limit).
      {R"({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}, "required": ["next"]}},
          "$ref": "#/$defs/node"})", "matches no text"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})", "left-recursive"},
  };
  for (const auto& [schema, words] : cases) {
    try {
      json_schema_grammar(json::parse(schema));
      ADD_FAILURE() << schema << " compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << schema << " -> " << e.what();
    }
  }
  // Nesting past the bound is refused, not recursed into.
  json deep = {{"type", "string"}};
  for (int i = 0; i < 100; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_THROW(json_schema_grammar(deep), Error);
}

}  // namespace
}  // namespace kiln::text
