// Real tokenizer vocabularies (llama.cpp's test vocabularies converted by
// transformers, and variants carrying what real files hold: NFC/NFKC/NFKD,
// empty BPE prefixes, added tokens with lstrip/rstrip/single_word; Unigram
// with SentencePiece's Precompiled normalizer as T5 and XLM-R ship it), each test
// string tokenized as `tokenizers` does, with and without special tokens.
// The corpus is large and made in a cache by tests/cli/hf_vocabs.sh, which
// runs this binary with KILN_VOCAB_CORPUS set; without it the test fails.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/text/hf_tokenizer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TEST(VocabCorpus, EveryStringTokenizesAsTokenizersDoes) {
  const char* dir = std::getenv("KILN_VOCAB_CORPUS");
  ASSERT_NE(dir, nullptr) << "KILN_VOCAB_CORPUS is not set: run tests/cli/hf_vocabs.sh, which makes the corpus";
  int vocabularies = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!fs::exists(entry.path() / "expected.json")) continue;
    const auto tok = text::HfTokenizer::from_file((entry.path() / "tokenizer.json").string());
    const auto e = nlohmann::json::parse(std::ifstream(entry.path() / "expected.json"));
    const auto& inputs = e["inputs"];
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string s = inputs[i];
      SCOPED_TRACE(entry.path().filename().string() + ": " + nlohmann::json(s).dump());
      EXPECT_EQ(tok.encode(s, false), e["ids"][i].get<std::vector<int32_t>>());
      EXPECT_EQ(tok.encode(s, true), e["ids_with_special"][i].get<std::vector<int32_t>>());
    }
    ++vocabularies;
  }
  EXPECT_GE(vocabularies, 16);
}

}  // namespace
}  // namespace kiln
