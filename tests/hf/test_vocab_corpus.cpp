// Real tokenizer vocabularies (llama.cpp's test vocabularies converted by
// transformers, and variants carrying what real files hold: NFC/NFKC/NFKD,
// empty BPE prefixes, added tokens with lstrip/rstrip/single_word; Unigram
// with SentencePiece's Precompiled normalizer as T5 and XLM-R ship it), each test
// string tokenized as `tokenizers` does, with and without special tokens.
// The corpus is large and made in a cache by tests/cli/hf_vocabs.sh, which
// runs this binary with KILN_VOCAB_CORPUS set; without it the test fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kiln/io/gguf.h"
#include "kiln/text/gguf_vocab.h"
#include "kiln/text/hf_tokenizer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TEST(VocabCorpus, EveryStringTokenizesAsTokenizersDoes) {
  const char* dir = std::getenv("KILN_VOCAB_CORPUS");
  ASSERT_NE(dir, nullptr) << "KILN_VOCAB_CORPUS is not set: run tests/cli/hf_vocabs.sh, which makes the corpus";
  int vocabularies = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    // (gguf-NAME/ holds a GGUF vocabulary's expectations: GgufUnigramVocabulariesTokenizeAsSentencePiece)
    if (!fs::exists(entry.path() / "tokenizer.json") || !fs::exists(entry.path() / "expected.json")) continue;
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

// llama.cpp's test vocabularies read as GGUF files (kiln/text/gguf_vocab.h),
// each test string against the ids in its .out file: what the model's own
// tokenizer gave (llama.cpp's convert_hf_to_gguf_update.py wrote them, and
// llama.cpp's test-tokenizer-0 holds llama.cpp to them).
TEST(VocabCorpus, GgufVocabulariesTokenizeAsTheModelsOwnTokenizers) {
  const char* dir = std::getenv("KILN_LLAMA_CPP_MODELS");
  ASSERT_NE(dir, nullptr) << "KILN_LLAMA_CPP_MODELS is not set: run tests/cli/hf_vocabs.sh";
  // Tokenizer models Kiln does not read from GGUF (Gemma 4's, T5's Unigram).
  const std::set<std::string> other_models = {"gemma4", "t5"};
  int vocabularies = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("ggml-vocab-") || entry.path().extension() != ".gguf" ||
        !fs::exists(entry.path().string() + ".out"))
      continue;
    const GgufFile file = GgufFile::open(entry.path().string());
    if (other_models.contains(file.metadata().value("tokenizer.ggml.model", ""))) continue;
    SCOPED_TRACE(name);
    const text::GgufVocab vocab = text::gguf_vocab(file.metadata());
    const auto tok = text::HfTokenizer::from_json(vocab.tokenizer, name);
    std::ifstream inp(entry.path().string() + ".inp"), out(entry.path().string() + ".out");
    std::stringstream all;
    all << inp.rdbuf();
    std::string text = all.str();
    const std::string separator = "\n__ggml_vocab_test__\n";
    std::vector<std::string> inputs;
    for (size_t at = 0; at < text.size();) {  // each string ends with the separator (as test-tokenizer-0 reads them)
      const size_t next = std::min(text.find(separator, at), text.size());
      inputs.push_back(text.substr(at, next - at));
      at = next + separator.size();
    }
    std::string line;
    size_t checked = 0;
    for (size_t i = 0; i < inputs.size() && std::getline(out, line); ++i, ++checked) {
      std::vector<int32_t> expected;
      std::istringstream ids(line);
      for (int32_t id; ids >> id;) expected.push_back(id);
      EXPECT_EQ(tok.encode(inputs[i], false), expected) << nlohmann::json(inputs[i]).dump();
    }
    EXPECT_EQ(checked, inputs.size()) << "the .out file has fewer lines than the .inp file has strings";
    EXPECT_GE(checked, 30u);
    std::printf("%s: %zu strings\n", name.c_str(), checked);
    ++vocabularies;
  }
  EXPECT_GE(vocabularies, 12);
}

// llama.cpp's Unigram test vocabularies ("t5"; nomic-bert-moe's is XLM-RoBERTa's real 250K pieces), which come
// without .inp/.out files: each string against the ids SentencePiece itself gives with the model rebuilt from the
// file (tests/hf/make_vocab_fixtures.py wrote them into the corpus's gguf-NAME/expected.json).
TEST(VocabCorpus, GgufUnigramVocabulariesTokenizeAsSentencePiece) {
  const char* corpus = std::getenv("KILN_VOCAB_CORPUS");
  const char* models = std::getenv("KILN_LLAMA_CPP_MODELS");
  ASSERT_TRUE(corpus && models)
      << "KILN_VOCAB_CORPUS and KILN_LLAMA_CPP_MODELS are not set: run tests/cli/hf_vocabs.sh";
  int vocabularies = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    if (!entry.path().filename().string().starts_with("gguf-")) continue;
    std::ifstream in(entry.path() / "expected.json");
    const nlohmann::json e = nlohmann::json::parse(in);
    SCOPED_TRACE(e["gguf"].get<std::string>());
    const GgufFile file = GgufFile::open((fs::path(models) / e["gguf"].get<std::string>()).string());
    const auto tok = text::HfTokenizer::from_json(text::gguf_vocab(file.metadata()).tokenizer, "gguf");
    for (size_t i = 0; i < e["inputs"].size(); ++i)
      EXPECT_EQ(tok.encode(e["inputs"][i].get<std::string>(), false), e["ids"][i].get<std::vector<int32_t>>())
          << e["inputs"][i].dump();
    std::printf("%s: %zu strings\n", e["gguf"].get<std::string>().c_str(), e["inputs"].size());
    ++vocabularies;
  }
  EXPECT_GE(vocabularies, 1);
}

}  // namespace
}  // namespace kiln
