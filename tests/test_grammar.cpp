// GBNF grammars (kiln/text/grammar): parsed and matched as llama.cpp's grammar
// engine does, on llama.cpp's own grammars and on grammars for each construct
// (tests/grammar/gbnf_cases.json, whose answers llama.cpp's validator gave:
// tests/grammar/make_gbnf_fixture.py); refused grammars named with the place;
// and token masks over a vocabulary whose tokens split UTF-8 characters.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/text/grammar/gbnf.h"
#include "kiln/text/grammar/matcher.h"

namespace kiln::text {
namespace {

std::shared_ptr<const Grammar> grammar_of(const std::string& text) {
  return std::make_shared<const Grammar>(parse_gbnf(text));
}

// Whole text through the matcher, as one token or as one token per byte.
bool matches(const std::shared_ptr<const Grammar>& g, const std::string& text, bool byte_by_byte) {
  GrammarMatcher m(g);
  if (byte_by_byte) {
    for (char c : text)
      if (!m.accept(std::string(1, c))) return false;
  } else if (!text.empty() && !m.accept(text)) {
    return false;
  }
  return m.can_end();
}

TEST(Grammar, AcceptsAndRefusesAsLlamaCppDoes) {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/tests/grammar/gbnf_cases.json");
  const nlohmann::json fixture = nlohmann::json::parse(in);
  int checked = 0, refused = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string name = c["name"], text = c["grammar"];
    if (c["refused"].get<bool>()) {
      EXPECT_THROW(parse_gbnf(text), Error) << name << ": llama.cpp refuses this grammar";
      ++refused;
      continue;
    }
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = grammar_of(text)) << name;
    for (const auto& input : c["inputs"]) {
      const std::string s = input["text"];
      const bool want = input["accepted"];
      EXPECT_EQ(matches(g, s, false), want) << name << " on '" << s << "'";
      EXPECT_EQ(matches(g, s, true), want) << name << " on '" << s << "', a byte at a time";
      ++checked;
    }
  }
  EXPECT_GE(checked, 140);
  EXPECT_GE(refused, 8);
}

TEST(Grammar, RefusalsNameTheRuleAndThePlace) {
  auto message = [](const std::string& text) {
    try {
      parse_gbnf(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  EXPECT_NE(message("root ::= a\n").find("rule 'a' is used (line 1) but never defined"), std::string::npos);
  EXPECT_NE(message("start ::= \"a\"\n").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(message("root ::= x\nx ::= y? root \"a\"\ny ::= \"b\"\n").find("left-recursive"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"\nroot ::= \"b\"\n").find("defined twice"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"\n  x ::= \"b\" )\n").find("after rule 'x' at line 2, column 13"),
            std::string::npos);
  EXPECT_NE(message("root ::= \"a\"{3,2}").find("maximum is below its minimum"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"{2001}").find("more than 2000 repetitions"), std::string::npos);
  EXPECT_NE(message("root ::= <[42]>").find("token references"), std::string::npos);
  // Left recursion through a rule that matches nothing only indirectly
  // passes llama.cpp's check (and its matcher would grow without end): the
  // matcher stops at its bound with an error.
  const auto indirect = std::make_shared<const Grammar>(parse_gbnf("root ::= a root \"x\" | \"y\"\na ::= b\nb ::= \"\" | \"z\""));
  try {
    GrammarMatcher m(indirect);
    ADD_FAILURE() << "expanding the grammar ended";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested rules"), std::string::npos) << e.what();
  }
  // Grammars that can finish no text: recursion without a way out, or a class no character is in.
  EXPECT_NE(message("root ::= \"{\" item \"}\"\nitem ::= \"[\" item \"]\"\n").find("rule 'root' matches no text"),
            std::string::npos);
  EXPECT_NE(message("root ::= \"a\" [^\\x00-\\U0010FFFF]").find("matches no text"), std::string::npos);
  EXPECT_NO_THROW(parse_gbnf("root ::= \"{\" item \"}\"\nitem ::= \"[\" item \"]\" | \"x\"\n"));
  // A parse with another start rule.
  EXPECT_NO_THROW(parse_gbnf("start ::= \"a\"", "start"));
}

// A byte-level vocabulary splits "é" (C3 A9) into two tokens: each half is
// allowed where the grammar can complete it, and nothing else.
TEST(Grammar, TokenMasksFollowCharactersSplitAcrossTokens) {
  const auto g = grammar_of("root ::= \"\xc3\xa9\" [0-9]+");
  const TokenTrie vocab({"\xc3", "\xa9", "\xc3\xa9", "1", "12", "a", "\xc3\xa9" "1", "", "\xe6"});
  GrammarMatcher m(g);
  auto allowed = [&] {
    std::vector<int> ids;
    const TokenSet set = m.allowed_tokens(vocab);
    for (size_t t = 0; t < vocab.size(); ++t)
      if (set.contains(t)) ids.push_back(int(t));
    return ids;
  };
  EXPECT_EQ(allowed(), (std::vector<int>{0, 2, 6}));
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept("\xc3"));
  EXPECT_FALSE(m.can_end()) << "half a character is not the end";
  EXPECT_EQ(allowed(), (std::vector<int>{1}));
  EXPECT_FALSE(m.accept("1")) << "a refused token leaves the state as it was";
  ASSERT_TRUE(m.accept("\xa9"));
  EXPECT_EQ(allowed(), (std::vector<int>{3, 4}));
  ASSERT_TRUE(m.accept("12"));
  EXPECT_TRUE(m.can_end());
}

// A negated class takes a partial character when some completion lies
// outside its ranges, and refuses it when every completion is inside.
TEST(Grammar, PartialCharactersAgainstNegatedClasses) {
  const auto all_two_byte = grammar_of("root ::= [^\\u0080-\\u07ff]");  // every 2-byte character excluded
  GrammarMatcher m(all_two_byte);
  EXPECT_FALSE(m.can_accept("\xc3")) << "C3 begins only 2-byte characters, all excluded";
  EXPECT_TRUE(m.can_accept("\xe6")) << "E6 begins 3-byte characters, which are allowed";
  EXPECT_TRUE(m.can_accept("a"));
}

// allowed_tokens walks the vocabulary's trie, numbers the states it passes
// through and steps each (state, character) once: the same mask as testing
// each token alone, at every point of a JSON text nested deeper than the
// frames a stack mask is keyed on, over a vocabulary of every byte,
// multi-byte pieces, tokens that prefix others and duplicates; and the
// union of stack masks (MaskCache) is the same mask.
TEST(Grammar, TokenMasksEqualTestingEachTokenAlone) {
  std::vector<std::string> vocab;
  for (int b = 1; b < 256; ++b) vocab.push_back(std::string(1, char(b)));
  for (const char* t : {"{\"", "\": ", "\", \"", "true", "false", "null", "tr", "\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC",
                        "\\u00", "1.5e", "-0", "00", "}}", "\"}", "  ", "\n  ", "a\"b", "\xF0\x9F", "\x98\x80", "null",
                        "", "\xC3", "\xE6\x97", "\xC0\xA2", "\xED\xA0\x80", "{\"a\xC3\xA9\": [1",
                        "f\"}]]", "\"}]", "]]", "\", \"", "e\": \"", "\xC3\xA9\"", "\"\xC3"})
    vocab.push_back(t);
  const TokenTrie trie(vocab);
  const auto json = std::make_shared<const Grammar>(parse_gbnf(R"(root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n]*)"));
  GrammarMatcher m(json);
  const std::string text = "{\"a\xC3\xA9\": [1.5e3, true, {\"b\": null}], \"c\": \"\\u00e9\xF0\x9F\x98\x80\","
                           " \"d\": [[[{\"e\": \"f\"}]], \"g\"]}";
  MaskCache stack_masks;  // each stack's top frames' masks, kept across the text (as a served grammar keeps them)
  for (size_t i = 0; i <= text.size(); ++i) {
    const TokenSet masked = m.allowed_tokens(trie), by_stacks = m.allowed_tokens(trie, &stack_masks);
    for (size_t t = 0; t < vocab.size(); ++t) {
      ASSERT_EQ(masked.contains(t), m.can_accept(vocab[t])) << "token " << t << " after " << i << " bytes";
      ASSERT_EQ(by_stacks.contains(t), masked.contains(t)) << "by stacks: token " << t << " after " << i << " bytes";
    }
    if (i < text.size()) {
      ASSERT_TRUE(m.accept(text.substr(i, 1))) << i;
    }
  }
  EXPECT_TRUE(m.can_end());
}

// Overlong forms and surrogates are not characters: a token holding one (or
// the start of one) is never allowed, so a constrained answer always
// decodes to the text the grammar matched.
TEST(Grammar, OverlongFormsAndSurrogatesAreRefused) {
  GrammarMatcher quote(grammar_of("root ::= \"\\\"\""));
  EXPECT_TRUE(quote.can_accept("\""));
  EXPECT_FALSE(quote.can_accept("\xC0")) << "C0 begins only overlong forms";
  EXPECT_FALSE(quote.can_accept("\xC0\xA2")) << "an overlong '\"'";
  GrammarMatcher any(grammar_of("root ::= ."));
  EXPECT_FALSE(any.can_accept("\xE0\x80")) << "E0 80 begins only overlong forms";
  EXPECT_FALSE(any.can_accept("\xED\xA0\x80")) << "a surrogate";
  EXPECT_FALSE(any.can_accept("\xF4\x90\x80\x80")) << "past U+10FFFF";
  EXPECT_TRUE(any.can_accept("\xF0\x9F\x98\x80"));
}

}  // namespace
}  // namespace kiln::text
