// JSON Schema compiled to a grammar (kiln/text/grammar/json_schema.h): for a
// suite of schemas, documents the schema accepts are matched and documents it
// rejects are not (the answers `jsonschema` gives, written beside each); the
// keywords Kiln cannot honour are refused by name. tests/cli/hf_grammar.sh
// samples a model under the same schemas and validates with `jsonschema`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>

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
      {"annotations change nothing", R"({"title": "T", "description": "d", "type": "string", "format": "email",
         "default": "x", "examples": ["y"]})", {R"("anything")"}, {"1"}},
      {"bounded integer and number", R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0,
         "maximum": 130}, "p": {"type": "number", "minimum": 0, "exclusiveMaximum": 1}}, "required": ["age", "p"]})",
       {R"({"age": 0, "p": 0})", R"({"age": 130, "p": 0.999})", R"({"age": 42, "p": 0.5})", R"({"age": 7, "p": 0.0})"},
       {R"({"age": -1, "p": 0.5})", R"({"age": 131, "p": 0.5})", R"({"age": 1, "p": 1})", R"({"age": 1, "p": 1.0})",
        R"({"age": 1, "p": -0.5})", R"({"age": 1.5, "p": 0.5})", R"({"age": 01, "p": 0.5})"}},
      {"draft 4 exclusive bounds", R"({"type": "integer", "minimum": 10, "exclusiveMinimum": true})", {"11", "99999"},
       {"10", "9", "-11"}},
      {"formats", R"({"type": "array", "prefixItems": [{"type": "string", "format": "date"}, {"type": "string",
         "format": "date-time"}, {"type": "string", "format": "uuid"}, {"type": "string", "format": "time"}],
         "items": false, "minItems": 4})",
       {R"(["2024-02-28", "2024-12-31T23:59:59Z", "123e4567-e89b-12d3-a456-426614174000", "08:30:00+05:30"])",
        R"(["1999-04-30", "2000-01-01T00:00:00.123456-01:00", "AAAAAAAA-AAAA-AAAA-AAAA-AAAAAAAAAAAA", "00:00:00Z"])"},
       {R"(["2024-02-30", "2024-12-31T23:59:59Z", "123e4567-e89b-12d3-a456-426614174000", "08:30:00Z"])",
        R"(["2024-04-31", "2024-12-31T23:59:59Z", "123e4567-e89b-12d3-a456-426614174000", "08:30:00Z"])",
        R"(["2024-01-01", "2024-12-31T24:00:00Z", "123e4567-e89b-12d3-a456-426614174000", "08:30:00Z"])",
        R"(["2024-01-01", "2024-12-31T23:59:59Z", "123e4567e89b12d3a456426614174000", "08:30:00Z"])",
        R"(["2024-01-01", "2024-12-31T23:59:59Z", "123e4567-e89b-12d3-a456-426614174000", "08:30:00"])"}},
      {"prefixItems, then items", R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
         "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4})",
       {"[1]", R"([1, "a"])", R"([1, "a", true, false])"},
       {"[]", R"(["a"])", R"([1, 2])", R"([1, "a", 3])", R"([1, "a", true, true, true])"}},
      {"prefixItems alone", R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "null"}], "items": false})",
       {"[]", "[1]", "[1, null]"}, {"[1, null, 1]", "[null]"}},
      {"prefixItems, then anything", R"({"prefixItems": [{"const": "x"}], "minItems": 2})",
       {R"(["x", 1])", R"(["x", {}, []])"}, {R"(["x"])", R"(["y", 1])"}},
      {"allOf of one schema", R"({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}},
         "required": ["x"], "additionalProperties": false}}, "type": "object", "properties": {"at": {"allOf":
         [{"$ref": "#/$defs/p"}], "description": "where"}}, "required": ["at"], "additionalProperties": false})",
       {R"({"at": {"x": 1}})"}, {R"({"at": {}})", R"({"at": 1})"}},
  };
  for (const SchemaCase& c : cases) {
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = json_schema_grammar(json::parse(c.schema))) << c.name;
    for (const char* doc : c.valid) EXPECT_TRUE(matches(g, doc)) << c.name << ": " << doc << " is valid";
    for (const char* doc : c.invalid) EXPECT_FALSE(matches(g, doc)) << c.name << ": " << doc << " is not valid";
  }
}

// Bounds against every value near them: integers, and numbers in quarters
// spelled as JSON writes them, inclusive and exclusive, one-sided and two.
TEST(JsonSchemaGrammar, BoundsAdmitExactlyTheNumbersWithinThem) {
  struct Bound {
    std::optional<double> value;
    bool exclusive;
  };
  const std::vector<Bound> lowers = {{{}, false}, {-37, false}, {-37, true}, {0, false}, {0, true}, {5, false},
                                     {100, true}, {2.5, false}};
  const std::vector<Bound> uppers = {{{}, false}, {-3, false}, {0, true}, {1, false}, {9, true}, {250, false},
                                     {-0.5, true}};
  auto spell = [](int quarters) {  // quarters / 4, shortest spelling
    std::string text = nlohmann::json(quarters / 4.0).dump();
    return text.size() > 2 && text.substr(text.size() - 2) == ".0" ? text.substr(0, text.size() - 2) : text;
  };
  for (const char* type : {"integer", "number"}) {
    for (const Bound& lo : lowers) {
      for (const Bound& hi : uppers) {
        json schema = {{"type", type}};
        if (lo.value) schema[lo.exclusive ? "exclusiveMinimum" : "minimum"] = *lo.value;
        if (hi.value) schema[hi.exclusive ? "exclusiveMaximum" : "maximum"] = *hi.value;
        auto inside = [&](double x) {
          return (!lo.value || (lo.exclusive ? x > *lo.value : x >= *lo.value)) &&
                 (!hi.value || (hi.exclusive ? x < *hi.value : x <= *hi.value));
        };
        const bool whole = std::string(type) == "integer" || ((!lo.value || *lo.value == int(*lo.value)) &&
                                                              (!hi.value || *hi.value == int(*hi.value)));
        std::shared_ptr<const Grammar> g;
        try {
          g = json_schema_grammar(schema);
        } catch (const Error& e) {  // refused only for a fractional bound on a number, or nothing inside
          bool any = false;
          for (int q = -2000; q <= 2000 && !any; ++q) any = inside(q / 4.0);
          EXPECT_TRUE(!whole || !any) << schema.dump() << ": " << e.what();
          continue;
        }
        ASSERT_TRUE(whole) << schema.dump() << " compiled";
        for (int q = -1200; q <= 1200; ++q) {
          if (std::string(type) == "integer" && q % 4) continue;
          EXPECT_EQ(matches(g, spell(q)), inside(q / 4.0)) << schema.dump() << " " << spell(q);
        }
        if (lo.value || hi.value) EXPECT_FALSE(matches(g, "1e0")) << schema.dump();  // bounded: no exponents
      }
    }
  }
  const auto g = json_schema_grammar(json::parse(R"({"type": "integer", "minimum": 1000000})"));
  EXPECT_FALSE(matches(g, "999999"));
  EXPECT_TRUE(matches(g, "1000000"));
  EXPECT_TRUE(matches(g, "9999999999999999"));
  EXPECT_FALSE(matches(g, "10000000000000000"));  // 17 digits: more than json-integer writes
}

// multipleOf: every integer in [-300, 300] and every hundredth and eighth
// in [-30, 30] is matched exactly when it is a multiple (decided in whole
// thousandths), for whole and decimal multiples, and 16-digit integers;
// longer fractions and exponents are not written.
TEST(JsonSchemaGrammar, MultipleOfAdmitsExactlyTheMultiples) {
  // (multipleOf's text, in thousandths)
  const std::pair<const char*, int64_t> multiples[] = {{"1", 1000}, {"3", 3000}, {"7", 7000}, {"10", 10000},
                                                       {"200", 200000}, {"0.5", 500}, {"0.25", 250}, {"0.01", 10},
                                                       {"2.5", 2500}, {"0.125", 125}, {"1.5e-1", 150}};
  auto spell = [](int64_t thousandths) {
    std::string text = std::to_string(std::abs(thousandths) / 1000);
    if (const int64_t f = std::abs(thousandths) % 1000; f) {
      std::string digits = std::to_string(1000 + f).substr(1);
      text += "." + digits.substr(0, digits.find_last_not_of('0') + 1);
    }
    if (thousandths < 0) text.insert(text.begin(), '-');
    return text;
  };
  for (const auto& [multiple, unit] : multiples)
    for (const char* type : {"integer", "number"}) {
      const json schema = json::parse(std::string(R"({"type": ")") + type + R"(", "multipleOf": )" + multiple + "}");
      const auto g = json_schema_grammar(schema);
      const bool integer = std::string(type) == "integer";
      for (int64_t x = integer ? -300000 : -30000; x <= (integer ? 300000 : 30000); x += integer ? 1000 : 5) {
        if (!integer && x % 125 && x % 10) continue;  // thousandths that are eighths or hundredths
        EXPECT_EQ(matches(g, spell(x)), x % unit == 0) << schema.dump() << " " << spell(x);
      }
      for (const int64_t big : {int64_t(9999999999999000), int64_t(9999999999999993)}) {  // 16 digits
        EXPECT_EQ(matches(g, std::to_string(big)), __int128(big) * 1000 % unit == 0) << schema.dump() << " " << big;
      }
      EXPECT_FALSE(matches(g, "10000000000000000")) << schema.dump();  // 17: more than json-integer writes
      EXPECT_FALSE(matches(g, "1e3")) << schema.dump();
      EXPECT_FALSE(matches(g, "5.")) << schema.dump();
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
      {R"({"type": "integer", "multipleOf": 5, "minimum": 0})", "'multipleOf' with minimum or maximum"},
      {R"({"type": "number", "multipleOf": 0})", "must be a number above 0"},
      {R"({"type": "number", "multipleOf": 1e-7})", "more than 6 decimal places"},
      {R"({"type": "integer", "multipleOf": 1000})", "at most 200"},
      {R"({"multipleOf": 3})", "needs \"type\": \"integer\" or \"number\""},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems' is not supported"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "only an allOf of one schema"},
      {R"({"allOf": [{"type": "string"}], "maxLength": 3})", "move it into the allOf"},
      {R"({"type": "number", "minimum": 0.5})", "only whole bounds are"},
      {R"({"type": "integer", "minimum": 5, "maximum": 3})", "no integer with at most 16 digits is >= 5 and <= 3"},
      {R"({"type": "number", "exclusiveMinimum": 2, "exclusiveMaximum": 2})", "no number"},
      {R"({"type": "integer", "minimum": 1e17})", "no integer"},
      {R"({"type": "integer", "minimum": "0"})", "must be a number"},
      {R"({"maximum": 3})", "needs \"type\": \"integer\" or \"number\""},
      {R"({"format": "date"})", "need \"type\": \"string\""},
      {R"({"type": "string", "format": "uuid", "pattern": "^a$"})", "write the format into the pattern"},
      {R"({"type": "string", "format": "date", "maxLength": 3})", "the format fixes the length"},
      {R"({"type": "array", "items": [{"type": "string"}]})", "write prefixItems"},
      {R"({"type": "array", "prefixItems": [{}], "items": false, "minItems": 2})", "more items than prefixItems has"},
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
