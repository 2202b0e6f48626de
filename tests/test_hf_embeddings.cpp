// Sentence embeddings (models/hf/hf_embedder.h) against sentence-transformers
// on the folders tests/hf/make_fixtures.py saved with it: mean, [CLS] and max
// pooling, normalised or not, texts cut at max_seq_length, in the hub's older
// layout (all-MiniLM-L6-v2's files) and in today's; and bad folders.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "hf_test_util.h"
#include "kiln/core/error.h"
#include "kiln/nn/init.h"
#include "models/hf/families.h"
#include "models/hf/hf_embedder.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class Embedders : public ::testing::TestWithParam<const char*> {};

// Within 1e-5 of sentence-transformers' encode(), element by element, and a cosine within 1e-6 of 1.
TEST_P(Embedders, EmbeddingsMatchSentenceTransformers) {
  auto e = models::load_hf_embedder(hf_test::fixture(GetParam()));
  const auto want = hf_test::expected(GetParam());
  const auto texts = want["texts"].get<std::vector<std::string>>();
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(models::embedding_ids(e, texts[i]), want["ids"][i].get<std::vector<int32_t>>()) << texts[i];
  const auto got = models::embed_texts(e, texts);
  ASSERT_EQ(got.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto w = want["embeddings"][i].get<std::vector<double>>();
    ASSERT_EQ(got[i].size(), w.size());
    double dot = 0, a2 = 0, b2 = 0, worst = 0;
    for (size_t k = 0; k < w.size(); ++k) {
      dot += got[i][k] * w[k], a2 += double(got[i][k]) * got[i][k], b2 += w[k] * w[k];
      worst = std::max(worst, std::isfinite(got[i][k]) ? std::abs(got[i][k] - w[k]) : 1e9);
    }
    EXPECT_LT(worst, 1e-5) << GetParam() << ": " << texts[i];
    EXPECT_GT(dot / std::sqrt(a2 * b2), 1 - 1e-6) << GetParam() << ": " << texts[i];
    if (want["normalize"].get<bool>()) {
      EXPECT_NEAR(a2, 1.0, 1e-5);
    }
  }
}

// A batch pads its shorter rows; each row's embedding is the one it gets alone.
TEST_P(Embedders, ABatchGivesEachTextItsOwnEmbedding) {
  auto e = models::load_hf_embedder(hf_test::fixture(GetParam()));
  const auto texts = hf_test::expected(GetParam())["texts"].get<std::vector<std::string>>();
  std::vector<std::vector<int32_t>> rows;
  for (const auto& t : texts) rows.push_back(models::embedding_ids(e, t));
  const auto together = models::embed_ids(e, rows).to_vector<float>();
  const size_t C = size_t(e.dimensions());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto alone = models::embed_ids(e, {rows[i]}).to_vector<float>();
    // (Within f32's rounding: a padded batch writes attention out where a text alone runs the fused op, and
    // nomic-bert's unnormalised states, a few units large, differ by up to 2e-6; padding that leaked would
    // move them by far more.)
    for (size_t k = 0; k < C; ++k) EXPECT_NEAR(together[i * C + k], alone[k], 5e-6) << texts[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Embedders,
                         ::testing::Values("embed-minilm", "embed-roberta-cls", "embed-distilbert-max",
                                           "embed-modernbert", "embed-nomic-bert", "embed-xlmr-cls", "embed-gemma3",
                                           "embed-minilm-dense"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(HfEmbedders, FolderKindComesFromTheArchitectures) {
  EXPECT_EQ(models::hf_model_kind(models::read_hf_config(hf_test::fixture("embed-minilm"))), "embedder");
  EXPECT_EQ(models::hf_model_kind(models::read_hf_config(hf_test::fixture("bert"))), "classifier");
}

// A classifier's folder embeds with its encoder (its head unused): mean-pooled, as SentenceTransformer(dir) does.
TEST(HfEmbedders, AClassifierFolderEmbedsWithItsEncoder) {
  auto e = models::load_hf_embedder(hf_test::fixture("bert"));
  EXPECT_EQ(e.pooling, models::Pooling::mean);
  EXPECT_FALSE(e.normalize);
  const auto v = models::embed_texts(e, {"What a wonderful, happy day!"});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(int64_t(v[0].size()), e.dimensions());
}

// A prompt of config_sentence_transformers.json goes before every text, as encode(prompt_name=...) puts it: asked
// for by name, or by default_prompt_name.
TEST(HfEmbedders, APromptGoesBeforeEveryText) {
  const auto want = hf_test::expected("embed-gemma3");
  const auto texts = want["texts"].get<std::vector<std::string>>();
  const std::string name = want["prompted"]["prompt_name"].get<std::string>();
  auto check = [&](models::HfEmbedder& e) {
    const auto got = models::embed_texts(e, texts);
    for (size_t i = 0; i < texts.size(); ++i)
      for (size_t k = 0; k < got[i].size(); ++k)
        EXPECT_NEAR(got[i][k], want["prompted"]["embeddings"][i][k].get<double>(), 1e-5) << texts[i];
  };
  auto e = models::load_hf_embedder(hf_test::fixture("embed-gemma3"));
  EXPECT_EQ(e.prompt, "");  // (default_prompt_name null)
  models::use_prompt(e, name);
  check(e);
  try {
    models::use_prompt(e, "classification");
    ADD_FAILURE() << "an unknown prompt name was taken";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("has document, query"), std::string::npos) << err.what();
  }
  const fs::path dir = hf_test::copy_fixture("embed-gemma3", fs::temp_directory_path() / "kiln_test_prompts");
  auto config = nlohmann::json::parse(std::ifstream(dir / "config_sentence_transformers.json"));
  config["default_prompt_name"] = name;
  std::ofstream(dir / "config_sentence_transformers.json") << config.dump();
  auto by_default = models::load_hf_embedder(dir.string());
  check(by_default);
  fs::remove_all(dir);
}

// EmbeddingGemma's body attends both ways: it embeds, and refuses to generate or train as a language model would.
TEST(HfEmbedders, ABidirectionalBodyDoesNotGenerate) {
  auto config = nlohmann::json::parse(std::ifstream(hf_test::fixture("embed-gemma3") + "/config.json"));
  std::shared_ptr<models::LanguageModel> model;
  {
    nn::MetaParametersGuard meta;  // no weights needed: the refusal comes first
    model = models::find_causal_lm_family("gemma3_text")->build(config);
  }
  try {
    model->new_cache();
    ADD_FAILURE() << "a bidirectional model made a cache";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("attends both ways"), std::string::npos) << err.what();
  }
  EXPECT_THROW(model->loss(Tensor::from_vector(std::vector<int64_t>{1, 2}, {1, 2}),
                           Tensor::from_vector(std::vector<int64_t>{2, 3}, {1, 2})),
               Error);
}

// The error loading a copy of `fixture` that `edit` changed, and embedding with it ("loaded": none).
std::string error_after(const std::string& fixture, const std::function<void(const fs::path&)>& edit) {
  // (a folder of the test's own: ctest runs this file's tests side by side, and each removes its folder after)
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const fs::path dir =
      hf_test::copy_fixture(fixture, fs::temp_directory_path() / ("kiln_test_embedders_" + test) / "bad");
  edit(dir);
  std::string error = "loaded";
  try {
    auto e = models::load_hf_embedder(dir.string());
    models::embed_texts(e, {"x"});
  } catch (const Error& err) {
    error = err.what();
  }
  fs::remove_all(dir.parent_path());
  return error;
}
void expect_says(const std::string& error, const std::string& says) {
  EXPECT_NE(error.find(says), std::string::npos) << error;
}

TEST(HfEmbedders, BadDenseModulesAreClearErrors) {
  auto error_of = [](const std::string& config) {
    return error_after("embed-minilm-dense", [&](const fs::path& dir) {
      if (config.empty())
        fs::remove(dir / "2_Dense/model.safetensors");
      else
        std::ofstream(dir / "2_Dense/config.json") << config;
    });
  };
  expect_says(
      error_of(R"({"in_features": 32, "out_features": 24, "activation_function": "torch.nn.modules.activation.SiLU"})"),
      "is not one Kiln computes");
  expect_says(error_of(R"({"in_features": 16, "out_features": 24})"), "in_features is 16");
  expect_says(error_of(R"({"in_features": 32, "out_features": 0})"), "out_features is 0");
  expect_says(error_of(R"({"in_features": 32, "out_features": 20})"), "linear.weight must be a [20, 32] tensor");
  expect_says(error_of(R"({"in_features": 32, "out_features": 24, "use_residual": true})"), "use_residual");
  expect_says(error_of(R"({"in_features": 32, "out_features": 24, "bias": false})"), "loaded");
  expect_says(error_of(""), "no model.safetensors");
  const std::string after_normalize =  // (the order the module list says is the order they run)
      R"([{"type": "x.Transformer", "path": ""}, {"type": "x.Pooling", "path": "1_Pooling"},
          {"type": "x.Normalize", "path": "3_Normalize"}, {"type": "x.Dense", "path": "2_Dense"}])";
  expect_says(error_after("embed-minilm-dense",
                          [&](const fs::path& dir) { std::ofstream(dir / "modules.json") << after_normalize; }),
              "then any Dense, then optionally Normalize");
}

TEST(HfEmbedders, BadFoldersAreClearErrors) {
  auto error_of = [](const std::string& file, const std::string& content) {
    return error_after("embed-minilm", [&](const fs::path& dir) { std::ofstream(dir / file) << content; });
  };
  expect_says(error_of("modules.json", "{"), "is not valid JSON");
  expect_says(error_of("modules.json", "[]"), "must list the modules");
  expect_says(error_of("modules.json", R"([{"type": "sentence_transformers.models.Dense", "path": ""}])"),
              "Transformer module first");
  expect_says(error_of("modules.json", R"([{"type": "x.Transformer", "path": ""}, {"type": "x.Dense", "path": "2"}])"),
              "is not one Kiln computes");
  expect_says(error_of("modules.json", R"([{"type": "x.Transformer", "path": ""}, {"type": "x.Pooling", "path": "../.."}])"),
              "leaves the folder");
  expect_says(error_of("modules.json", R"([{"type": "x.Transformer", "path": ""}])"), "has no Pooling module");
  expect_says(error_of("1_Pooling/config.json", R"({"pooling_mode": "weightedmean"})"), "\"weightedmean\"");
  expect_says(error_of("1_Pooling/config.json", R"({"pooling_mode": ["mean", "max"]})"), "2 pooling modes");
  expect_says(error_of("1_Pooling/config.json", R"({"pooling_mode_mean_tokens": false})"), "0 pooling modes");
  expect_says(error_of("1_Pooling/config.json", R"({"pooling_mode": 3})"), "is not a mode name");
  expect_says(error_of("sentence_bert_config.json", R"({"max_seq_length": -4})"), "max_seq_length");
  expect_says(error_of("sentence_bert_config.json", R"({"do_lower_case": true})"), "do_lower_case");
  EXPECT_EQ(error_of("2_Normalize/config.json", "{}"), "loaded");
}

}  // namespace
}  // namespace kiln
