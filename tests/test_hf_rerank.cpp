// Rerankers (cross-encoders) against sentence-transformers' CrossEncoder on
// the folders tests/hf/make_fixtures.py saved: a pair of texts joined as
// each tokenizer's pair form joins it (BERT's [CLS] A [SEP] B [SEP] with
// the second part type 1, XLM-RoBERTa's <s> A </s></s> B </s>), cut
// longest first at the model's positions, and each pair's relevance (the
// sigmoid of the one logit).
#include <gtest/gtest.h>

#include "apps/recipes/hf_inference.h"
#include "hf_test_util.h"
#include "kiln/core/error.h"
#include "models/hf/hf_model.h"

namespace kiln {
namespace {

class Rerankers : public ::testing::TestWithParam<const char*> {};

TEST_P(Rerankers, PairsTokenizeAsTransformersAndScoreAsCrossEncoder) {
  const auto want = hf_test::expected(GetParam());
  const auto documents = want["documents"].get<std::vector<std::string>>();
  const std::string query = want["query"];
  const auto c = models::load_hf_classifier(hf_test::fixture(GetParam()));
  for (size_t i = 0; i < documents.size(); ++i) {
    const text::TokenPair p = c.tokenizer.encode_pair(query, documents[i], want["max_length"].get<int64_t>());
    EXPECT_EQ(p.ids, want["ids"][i].get<std::vector<int32_t>>()) << documents[i];
    EXPECT_EQ(p.types, want["token_type_ids"][i].get<std::vector<int32_t>>()) << documents[i];
  }
  auto served = recipes::load_hf_for_inference(hf_test::fixture(GetParam()), Device::cpu());
  const auto scored = served.model->rerank(query, documents);
  ASSERT_EQ(scored.scores.size(), documents.size());
  for (size_t i = 0; i < documents.size(); ++i)
    EXPECT_NEAR(scored.scores[i], want["scores"][i].get<double>(), 1e-5) << documents[i];
  int64_t tokens = 0;
  for (const auto& ids : want["ids"]) tokens += int64_t(ids.size());
  EXPECT_EQ(scored.tokens, tokens);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Rerankers, ::testing::Values("rerank-minilm", "rerank-xlmr"), [](const auto& info) {
  std::string name = info.param;
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
});

// A classifier of several labels is not a reranker; nor is a language model.
TEST(Rerankers, OnlyOneLabelClassifiersRerank) {
  auto classifier = recipes::load_hf_for_inference(hf_test::fixture("bert"), Device::cpu());
  EXPECT_THROW(classifier.model->rerank("q", {"d"}), Error);
  auto lm = recipes::load_hf_for_inference(hf_test::fixture("llama-gqa"), Device::cpu());
  EXPECT_THROW(lm.model->rerank("q", {"d"}), Error);
}

}  // namespace
}  // namespace kiln
