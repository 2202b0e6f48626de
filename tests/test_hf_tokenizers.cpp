// Kiln's tokenizer.json pipeline against the `tokenizers` library: the ids of
// every fortune and of edge cases, decoding, streaming decoding and bad files.
#include <zlib.h>

#include <filesystem>

#include "kiln/core/error.h"
#include "kiln/text/hf_tokenizer.h"
#include "kiln/text/utf8.h"
#include "hf_test_util.h"

namespace kiln {
namespace {

using text::HfTokenizer;

const char* const kFamilies[] = {"gpt2", "llama3", "llama2", "mistral", "bert"};

HfTokenizer load(const std::string& family) {
  return HfTokenizer::from_file(hf_test::fixture("tokenizers/" + family + "/tokenizer.json"));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The fortunes of one file, split as make_fixtures.py splits them.
std::vector<std::string> fortunes_of(const std::string& path) {
  const std::string all = text::utf8_lossy(read_file(path));
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find("\n%\n", start);
    if (end == std::string::npos) end = all.size();
    std::string t = all.substr(start, end - start);
    if (t.find_first_not_of(" \t\n\r\f\v") != std::string::npos) out.push_back(t);
    start = end + 3;
  }
  return out;
}

class Tokenizers : public ::testing::TestWithParam<const char*> {};

TEST_P(Tokenizers, EdgeCasesMatchTokenizersIdsAndDecoding) {
  const HfTokenizer tok = load(GetParam());
  for (const auto& c : hf_test::expected(std::string("tokenizers/") + GetParam())["edge_cases"]) {
    const std::string text = c["text"];
    const auto ids = tok.encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: " << text;
    EXPECT_EQ(tok.decode(c["ids"].get<std::vector<int32_t>>()), c["decoded"].get<std::string>()) << "text: " << text;
  }
}

TEST_P(Tokenizers, EveryFortuneMatchesTokenizers) {
  const HfTokenizer tok = load(GetParam());
  const auto expected = hf_test::expected(std::string("tokenizers/") + GetParam())["fortunes"];
  ASSERT_FALSE(expected.empty());
  for (const auto& [name, want] : expected.items()) {
    const auto texts = fortunes_of("/usr/share/games/fortunes/" + name);
    ASSERT_EQ(texts.size(), want["fortunes"].get<size_t>()) << name;
    uLong crc = crc32(0, nullptr, 0);
    size_t tokens = 0;
    for (const auto& t : texts) {
      const auto ids = tok.encode(t);
      tokens += ids.size();
      std::string line;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) line += ',';
        line += std::to_string(ids[i]);
      }
      line += ";";
      crc = crc32(crc, reinterpret_cast<const Bytef*>(line.data()), uInt(line.size()));
    }
    EXPECT_EQ(tokens, want["tokens"].get<size_t>()) << GetParam() << " on fortunes file " << name;
    EXPECT_EQ(crc, want["crc32"].get<uLong>()) << GetParam() << " on fortunes file " << name;
  }
}

TEST_P(Tokenizers, StreamingDecodeGivesWholeCharactersAndTheWholeText) {
  const HfTokenizer tok = load(GetParam());
  for (const auto& c : hf_test::expected(std::string("tokenizers/") + GetParam())["edge_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    text::DecodeStream stream(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = stream.step(id);
      EXPECT_EQ(text::utf8_lossy(piece), piece) << "half a character streamed for " << c["text"];
      streamed += piece;
    }
    EXPECT_EQ(streamed, tok.decode(ids)) << c["text"];
  }
  // Characters spelled by byte tokens, one after another (a ByteFallback
  // decoder breaks a run that starts inside one): the stream loses none.
  for (const std::string text : {"\xF0\x9F\x98\x80\xF0\x9F\x98\x80 ok", "a\xCD\xA4B\" \xF0\x9D\x94\x98\xF0\x9D\x94\x98"}) {
    const std::vector<int32_t> ids = tok.encode(text, false);
    text::DecodeStream stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.step(id);
    EXPECT_EQ(streamed, tok.decode(ids)) << text;
  }
  // A stream that ends inside a character: flush gives what decoding the whole gives (U+FFFD), once.
  const std::vector<int32_t> ids = tok.encode("ok \xF0\x9F\x98\x80", false);
  for (size_t cut = 1; cut <= ids.size(); ++cut) {
    const std::vector<int32_t> part(ids.begin(), ids.begin() + long(cut));
    text::DecodeStream stream(tok);
    std::string streamed;
    for (int32_t id : part) streamed += stream.step(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, tok.decode(part)) << cut << " tokens";
    EXPECT_EQ(stream.flush(), "");
  }
}

// A model's vocabulary may be padded past its tokenizer's (the speed model's
// 49,152 over 700), and a model can sample such an id: decoding leaves it
// out, as tokenizers does, and a stream goes on.
TEST_P(Tokenizers, IdsPastTheVocabularyDecodeToNothing) {
  const HfTokenizer tok = load(GetParam());
  const int32_t past = int32_t(tok.vocab_size()) + 1000;
  const std::vector<int32_t> ids = {300, 301};
  EXPECT_EQ(tok.decode({300, past, 301}), tok.decode(ids));
  text::DecodeStream stream(tok);
  std::string streamed;
  for (int32_t id : {300, past, 301}) streamed += stream.step(id);
  EXPECT_EQ(streamed, tok.decode(ids));
}

// A token's bytes, what a grammar matches (llama.cpp's token_to_piece): the
// pieces of a text join to its decoding (a SentencePiece text keeps the
// space it was given in front), whole where single tokens hold half a
// character. BERT's WordPiece pieces are for encoders, not generation.
TEST_P(Tokenizers, TokenBytesJoinToTheText) {
  if (std::string(GetParam()) == "bert") GTEST_SKIP() << "an encoder's vocabulary: nothing generates with it";
  const HfTokenizer tok = load(GetParam());
  int split_characters = 0;
  std::vector<std::string> texts = {"\xF0\x9F\x98\x80 \xF0\x9F\xA6\x80 emoji", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE2\x84\x95 \xE2\x8A\x86 \xE2\x84\xA4"};
  for (const auto& c : hf_test::expected(std::string("tokenizers/") + GetParam())["edge_cases"]) texts.push_back(c["text"]);
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tok.encode(text, false);
    std::string joined;
    for (int32_t id : ids) {
      const std::string piece = tok.token_bytes(id);
      split_characters += text::utf8_lossy(piece) != piece;
      joined += piece;
    }
    const std::string decoded = tok.decode(ids, false);
    EXPECT_TRUE(joined == decoded || joined == " " + decoded) << text << ": '" << joined << "'";
  }
  if (std::string(GetParam()) != "mistral") EXPECT_GT(split_characters, 0) << "no token held part of a character";
}

INSTANTIATE_TEST_SUITE_P(Families, Tokenizers, ::testing::ValuesIn(kFamilies));

TEST(TokenizerFiles, UnsupportedOrBrokenFilesAreClearErrors) {
  auto refuses = [](const std::string& json, const std::string& says) {
    try {
      HfTokenizer::from_json_text(json, "test.json");
      ADD_FAILURE() << "accepted: " << json;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refuses("{\"model\": {\"type\": \"WordLevel\", \"vocab\": {}}}", "model type 'WordLevel' is not supported");
  refuses("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"normalizer\": {\"type\": \"ByteLevel\"}}",
          "normalizer type 'ByteLevel' is not supported");
  // An empty prefix or suffix is none (Qwen2's files); a real one changes the merges and is refused by name.
  refuses("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [], \"end_of_word_suffix\": \"</w>\"}}",
          "\"end_of_word_suffix\" = \"</w>\" is not supported");
  EXPECT_NO_THROW(HfTokenizer::from_json_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [], "
                                              "\"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\"}}",
                                              "test.json"));
  refuses("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\"]]}}", "not [piece, score]");
  refuses("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]], \"unk_id\": 5}}", "past the vocabulary");
  refuses("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}, \"normalizer\": {\"type\": \"Precompiled\", "
          "\"precompiled_charsmap\": \"AAAA!\"}}",
          "not base64");
  refuses("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}, \"normalizer\": {\"type\": \"Precompiled\", "
          "\"precompiled_charsmap\": \"/////w==\"}}",
          "does not fit");
  refuses("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "names a token the vocabulary lacks");
  refuses("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", "not a non-negative");
  // Numbers that are not integers in range are refused, not cast (casting a
  // float out of range is undefined behaviour: the fuzzer found these).
  const std::string bpe = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}";
  refuses(bpe + ", \"added_tokens\": [{\"id\": 1e30, \"content\": \"zz\"}]}", "an added token's id is 1e+30");
  refuses(bpe + ", \"post_processor\": {\"type\": \"BertProcessing\", \"cls\": [\"a\", 0.5], \"sep\": [\"a\", 0]}}",
          "the cls id is 0.5");
  refuses(bpe + ", \"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": -1}}", "\"start\" is -1");
  refuses(bpe + ", \"decoder\": {\"type\": \"Strip\", \"content\": \"\", \"start\": 1}}", "no \"content\" to strip");
  refuses("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0}, \"max_input_chars_per_word\": 1e300}}",
          "\"max_input_chars_per_word\" is 1e+300");
  refuses("not json", "is not valid JSON");
  refuses("{}", "has no \"model\"");
  refuses("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
          "\"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
          "does not compile");
  try {
    HfTokenizer::from_file("/nonexistent/tokenizer.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read tokenizer"), std::string::npos);
  }
}

// parse_special false (llama-server's /tokenize and /infill, tokenizers' encode_special_tokens): a special token's
// spelling is text; an added token that is not special ("yes" of a reranker's vocabulary) is still that token.
TEST(TokenizerFiles, SpecialTokensSpellingsReadAsTextWhenAsked) {
  const HfTokenizer tok = HfTokenizer::from_file(hf_test::fixture("rerank-qwen3") + "/tokenizer.json");
  const std::string text = "<|im_start|>yes and no<|end_of_text|>";
  const int32_t start = *tok.token_to_id("<|im_start|>"), end = *tok.token_to_id("<|end_of_text|>");
  const int32_t yes = *tok.token_to_id("yes");
  EXPECT_EQ(tok.encode(text, false), (std::vector<int32_t>{start, yes, 304, 222, 643, end}));
  const std::vector<int32_t> as_text = tok.encode(text, false, false);
  // tokenizers 0.23's ids, with encode_special_tokens = True on this file
  EXPECT_EQ(as_text, (std::vector<int32_t>{29, 93, 328, 64, 310, 474, 93, 31, yes, 304, 222, 643,
                                           29, 93, 431, 64, 638, 64,  85, 70, 89,  85,  93,  31}));
  EXPECT_EQ(tok.decode(as_text, false), text);
  EXPECT_EQ(tok.encode("yes and no", false, false), tok.encode("yes and no", false));
}

TEST(TokenizerFiles, InvalidUtf8InputIsReadAsReplacementCharacters) {
  const HfTokenizer tok = load("gpt2");
  EXPECT_EQ(tok.encode("a\xff" "b"), tok.encode("a\xEF\xBF\xBD" "b"));
}

}  // namespace
}  // namespace kiln
