// How Hugging Face folders are read: specs, kinds (Qwen3-Reranker's by its
// README), sharded and broken checkpoints, configs that build or are refused
// by name, dropout, RoPE variants, mixtures of experts in the layouts files
// hold them, and generation's bounds.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "apps/recipes/hf_inference.h"
#include "apps/recipes/recipe.h"
#include "hf_test_util.h"
#include "kiln/core/error.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/init.h"
#include "models/hf/families.h"
#include "models/hf/hf_model.h"
#include "models/llama/moe.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TEST(HfFolders, SpecsNameFolders) {
  EXPECT_EQ(models::hf_folder("hf:/models/x"), "/models/x");
  EXPECT_EQ(models::hf_folder("hf:~/models/x"), std::string(std::getenv("HOME")) + "/models/x");
  EXPECT_EQ(models::hf_folder("runs/fortunes-gpt"), std::nullopt);
}

TEST(HfFolders, KindComesFromTheConfig) {
  EXPECT_EQ(models::hf_model_kind(models::read_hf_config(hf_test::fixture("bert"))), "classifier");
  EXPECT_EQ(models::hf_model_kind(models::read_hf_config(hf_test::fixture("qwen2"))), "causal");
}

// A copy of a fixture folder that a test may break.
fs::path scratch_copy(const std::string& fixture_name, const std::string& test) {
  return hf_test::copy_fixture(fixture_name,
                               fs::temp_directory_path() / ("kiln_hf_" + std::to_string(::getpid()) + "_" + test));
}

// Qwen3-Reranker ships as Qwen3ForCausalLM; its README heading or its folder's name says it is a reranker (as
// llama.cpp's converter reads them), and then it loads as a classifier with its output's "yes" and "no" rows.
TEST(HfFolders, Qwen3RerankerIsToldByItsReadmeOrName) {
  const std::string reranker = hf_test::fixture("rerank-qwen3");
  EXPECT_EQ(models::hf_folder_kind(reranker, models::read_hf_config(reranker)), "classifier");
  const fs::path renamed = scratch_copy("qwen3", "Qwen3-Reranker-0.6B");  // (the scratch folder's name holds it)
  EXPECT_EQ(models::hf_folder_kind(renamed.string(), models::read_hf_config(renamed.string())), "classifier");
  fs::remove_all(renamed);
  const std::string plain = hf_test::fixture("qwen3");
  EXPECT_EQ(models::hf_folder_kind(plain, models::read_hf_config(plain)), "causal");
  const models::HfClassifier c = models::load_hf_classifier(reranker);
  EXPECT_EQ(c.labels, (std::vector<std::string>{"yes", "no"}));
  EXPECT_NE(c.rerank_prompt.find("{document}"), std::string::npos);
}

void expect_error(const fs::path& dir, const std::string& says) {
  try {
    models::load_hf_causal_lm(dir.string());
    ADD_FAILURE() << "loaded " << dir;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

using hf_test::edit_config;

// A checkpoint in shards (model.safetensors.index.json naming the file of
// each tensor), as large models are stored: the same logits as one file; a
// truncated or missing shard, or an index that misplaces a tensor, is a clear error.
fs::path sharded_copy(const std::string& fixture_name, const std::string& test) {
  const fs::path dir = scratch_copy(fixture_name, test);
  const SafetensorsFile whole = load_safetensors((dir / "model.safetensors").string());
  fs::remove(dir / "model.safetensors");
  NamedTensors shards[2];
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  size_t i = 0;
  for (const auto& [name, t] : whole.tensors) {
    const size_t shard = i++ % 2;
    shards[shard].emplace_back(name, t);
    index["weight_map"][name] = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
  }
  for (size_t s = 0; s < 2; ++s)
    save_safetensors((dir / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors")).string(), shards[s]);
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  return dir;
}

TEST(HfFolders, ShardedCheckpointsLoadAsOneFile) {
  const fs::path dir = sharded_copy("llama-gqa", "sharded");
  auto lm = models::load_hf_causal_lm(dir.string(), DType::f32);
  const auto want = hf_test::expected("llama-gqa");
  EXPECT_LT(hf_test::worst_difference(hf_test::logprobs(*lm.model, want["ids"].get<std::vector<int32_t>>()),
                                      want["logprobs_f32"]),
            1e-3);
  fs::remove_all(dir);
}

TEST(HfFolders, BrokenShardsAreClearErrors) {
  {
    auto dir = sharded_copy("llama-gqa", "shard-truncated");
    fs::resize_file(dir / "model-00002-of-00002.safetensors",
                    fs::file_size(dir / "model-00002-of-00002.safetensors") - 64);
    expect_error(dir, "model-00002-of-00002.safetensors: tensor");
  }
  {
    auto dir = sharded_copy("llama-gqa", "shard-missing");
    fs::remove(dir / "model-00001-of-00002.safetensors");
    expect_error(dir, "names shard model-00001-of-00002.safetensors, which is missing");
  }
  {
    auto dir = sharded_copy("llama-gqa", "shard-misplaced");
    nlohmann::json index = nlohmann::json::parse(std::ifstream(dir / "model.safetensors.index.json"));
    index["weight_map"]["model.norm.weight"] =
        index["weight_map"]["model.norm.weight"] == "model-00001-of-00002.safetensors"
            ? "model-00002-of-00002.safetensors"
            : "model-00001-of-00002.safetensors";
    std::ofstream(dir / "model.safetensors.index.json") << index.dump();
    expect_error(dir, "'model.norm.weight'");
  }
}

// config.json is input a user (or a download) hands Kiln: any mutation of a
// real one builds a model or fails with a kiln::Error, never another
// exception, a crash or a huge allocation (the model is built on the meta
// device, as the loader and the planner build it).
TEST(HfFolders, MutatedConfigsBuildOrFailClearly) {
  std::mt19937 rng(7);
  const std::vector<nlohmann::json> values = {nullptr,
                                              -1,
                                              0,
                                              1,
                                              3,
                                              7,
                                              1 << 30,
                                              int64_t(1) << 40,
                                              0.5,
                                              -2.5,
                                              "x",
                                              true,
                                              nlohmann::json::array(),
                                              nlohmann::json::object(),
                                              {1, 2}};
  int built = 0, refused = 0;
  for (const char* fixture :
       {"gpt2",    "llama-gqa", "llama-mqa-tied", "mistral", "qwen2",       "qwen3",         "olmo2",   "granite",
        "smollm3", "phi3",      "gemma",          "gemma2",  "gemma3",      "gemma3-vision", "mixtral", "qwen3-moe",
        "olmoe",   "bert",      "distilbert",     "roberta", "xlm-roberta", "modernbert"}) {
    const nlohmann::json base = models::read_hf_config(hf_test::fixture(fixture));
    std::vector<std::string> keys;
    for (const auto& [k, v] : base.items()) keys.push_back(k);
    for (int trial = 0; trial < 150; ++trial) {
      nlohmann::json config = base;
      for (int edits = 1 + int(rng() % 3); edits > 0; --edits) {
        const std::string& key = keys[rng() % keys.size()];
        if (key == "model_type") continue;
        if (rng() % 5 == 0)
          config.erase(key);
        else
          config[key] = values[rng() % values.size()];
      }
      try {
        nn::MetaParametersGuard meta;
        const std::string type = config["model_type"];
        if (const auto* f = models::find_causal_lm_family(type))
          f->build(config);
        else
          models::find_classifier_family(type)->build(config);
        ++built;
      } catch (const Error&) {
        ++refused;
      } catch (const std::exception& e) {
        ADD_FAILURE() << fixture << ": " << config.dump() << " threw a non-Kiln error: " << e.what();
      }
    }
  }
  EXPECT_GT(built, 50);
  EXPECT_GT(refused, 50);
}

// Each of config.json's dropout probabilities acts where transformers puts
// it, in training mode only: alone non-zero, it changes the training-mode
// output and leaves the eval-mode output bit for bit that of no dropout.
TEST(HfFolders, EachConfigDropoutActsInTrainingOnly) {
  const std::map<std::string, std::vector<std::string>> keys = {
      {"gpt2", {"resid_pdrop", "embd_pdrop", "attn_pdrop"}},
      {"bert", {"hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"}},
      {"distilbert", {"dropout", "attention_dropout", "seq_classif_dropout"}},
      {"mistral", {"attention_dropout"}}};
  const Tensor ids = Tensor::from_vector<int64_t>({5, 17, 42, 8, 99, 23, 61, 4, 30, 12}, {2, 5});
  for (const auto& [fixture, names] : keys) {
    const bool causal = models::hf_model_kind(models::read_hf_config(hf_test::fixture(fixture))) == "causal";
    // The outputs (training mode, eval mode) of the fixture with `p` for `key` and 0 for the others.
    auto outputs = [&, fixture = fixture, names = names, causal](const std::string& key, double p) {
      const fs::path dir = scratch_copy(fixture, "dropout_" + fixture);
      edit_config(dir, [&](nlohmann::json& j) {
        for (const std::string& k : names) j[k] = k == key ? p : 0.0;
      });
      std::shared_ptr<nn::Module> model;
      std::function<Tensor()> forward;
      if (causal) {
        auto lm = models::load_hf_causal_lm(dir.string(), DType::f32).model;
        model = lm, forward = [lm, &ids] { return lm->forward(ids); };
      } else {
        auto c = models::load_hf_classifier(dir.string(), DType::f32).model;
        model = c, forward = [c, &ids] { return c->forward(ids, {5, 5}); };
      }
      fs::remove_all(dir);
      NoGradGuard ng;
      model->train();
      const auto training = forward().to_vector<float>();
      model->eval();
      return std::pair{training, forward().to_vector<float>()};
    };
    const auto none = outputs("", 0);
    EXPECT_EQ(none.first, none.second) << fixture;
    for (const std::string& key : names) {
      const auto with = outputs(key, 0.3);
      EXPECT_NE(with.first, none.first) << fixture << " " << key << " acts in training";
      EXPECT_EQ(with.second, none.second) << fixture << " " << key << " leaves inference alone";
    }
    const fs::path bad = scratch_copy(fixture, "dropout_bad");
    edit_config(bad, [&](nlohmann::json& j) { j[names[0]] = 1.5; });
    try {
      causal ? (void)models::load_hf_causal_lm(bad.string()) : (void)models::load_hf_classifier(bad.string());
      ADD_FAILURE() << fixture << " loaded with " << names[0] << " 1.5";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("a dropout probability in [0, 1)"), std::string::npos) << e.what();
    }
    fs::remove_all(bad);
  }
}

TEST(HfFolders, Llama3RopeScalingTakesAnIntegerContext) {
  nlohmann::json config = models::read_hf_config(hf_test::fixture("llama-gqa"));
  config["rope_parameters"]["original_max_position_embeddings"] = 1e300;  // the fixture is llama3-scaled
  nn::MetaParametersGuard meta;
  try {
    models::find_causal_lm_family("llama")->build(config);
    ADD_FAILURE() << "accepted a context of 1e300";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("original_max_position_embeddings"), std::string::npos) << e.what();
  }
  config["rope_parameters"]["original_max_position_embeddings"] = 8192;
  models::find_causal_lm_family("llama")->build(config);
}

TEST(HfFolders, BadFoldersAreClearErrors) {
  expect_error("/nonexistent/model", "is not a folder");
  {
    auto dir = scratch_copy("llama-gqa", "missing");
    fs::remove(dir / "model.safetensors");
    expect_error(dir, "holds neither model.safetensors");
  }
  {
    auto dir = scratch_copy("llama-gqa", "truncated");
    fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") - 100);
    expect_error(dir, "truncated");
  }
  {
    auto dir = scratch_copy("llama-gqa", "arch");
    edit_config(dir, [](auto& j) { j["model_type"] = "mamba"; });
    expect_error(dir, "model_type 'mamba' is not a causal language model Kiln supports");
  }
  {
    auto dir = scratch_copy("llama-gqa", "rope");
    edit_config(dir, [](auto& j) { j["rope_parameters"]["rope_type"] = "proportional"; });
    expect_error(dir, "config.json (rope_parameters): \"rope_type\" = \"proportional\" changes the model's math");
  }
  {
    auto dir = scratch_copy("llama-gqa", "rope-fields");
    edit_config(dir, [](auto& j) { j["rope_parameters"].erase("factor"); });
    expect_error(dir, "config.json (rope_parameters): \"factor\" is missing; expected a positive number");
  }
  {
    auto dir = scratch_copy("llama-gqa", "eos");
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [2, 999999]})";
    expect_error(dir, "eos_token_id 999999 is not a token of the model's");
  }
  {
    auto dir = scratch_copy("llama-gqa", "act");
    edit_config(dir, [](auto& j) { j["hidden_act"] = "gelu"; });
    expect_error(dir, "\"hidden_act\" = \"gelu\" changes the model's math");
  }
  {
    auto dir = scratch_copy("llama-gqa", "shape");
    edit_config(dir, [](auto& j) { j["intermediate_size"] = 64; });
    expect_error(dir, "has shape");
  }
  {
    auto dir = scratch_copy("llama-gqa", "tokenizer");
    std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "WordLevel", "vocab": {}}})";
    expect_error(dir, "model type 'WordLevel' is not supported");
  }
}

// A longrope model's keys depend on the sequence's length, not only on the
// tokens before them: its caches never share prefixes (a llama's do), and
// Phi-3 recomputes a cached sequence that grows past the original context.
TEST(HfFolders, LongropeCachesShareNoPrefixes) {
  for (const char* fixture : {"llama-gqa", "rope-longrope", "phi3"}) {
    auto lm = models::load_hf_causal_lm(hf_test::fixture(fixture), DType::f32);
    std::vector<int64_t> prompt(40);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int64_t(3 + (i * 7) % 90);
    models::KvCache first = lm.model->new_cache(), second = lm.model->new_cache();
    NoGradGuard ng;
    const std::vector<float> a = lm.model->forward_prompts({prompt}, {&first}).to_vector<float>();
    const std::vector<float> b = lm.model->forward_prompts({prompt}, {&second}).to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << fixture << " " << i;
    const bool longrope = std::string(fixture) != "llama-gqa";
    EXPECT_EQ(lm.model->kv_pool()->reused_positions() == 0, longrope) << fixture;
  }
  // Phi-3 past its original 16 positions: decoding from a cache of 16 equals
  // one pass over all 17 tokens (the cache was recomputed with the long factors).
  auto phi = models::load_hf_causal_lm(hf_test::fixture("phi3"), DType::f32);
  NoGradGuard ng;
  std::vector<int64_t> ids(17);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(5 + (i * 11) % 80);
  models::KvCache cache = phi.model->new_cache();
  phi.model->forward_prompts({std::vector<int64_t>(ids.begin(), ids.end() - 1)}, {&cache});
  const std::vector<float> stepped = phi.model->forward_decode({int32_t(ids.back())}, {&cache}).to_vector<float>();
  models::KvCache whole_cache = phi.model->new_cache();
  const std::vector<float> whole = phi.model->forward_prompts({ids}, {&whole_cache}).to_vector<float>();
  ASSERT_EQ(stepped.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(stepped[i], whole[i], 1e-4) << i;
  EXPECT_EQ(cache.length(), 17);
}

// The new families' keys that change the math are read or refused by name.
TEST(HfFolders, NewFamiliesRefuseWhatTheyDoNotImplementByName) {
  const auto error_of = [](const char* fixture, const std::function<void(nlohmann::json&)>& edit) -> std::string {
    nlohmann::json config = models::read_hf_config(hf_test::fixture(fixture));
    edit(config);
    nn::MetaParametersGuard meta;
    try {
      models::find_causal_lm_family(config["model_type"])->build(config);
    } catch (const Error& e) {
      return e.what();
    }
    return "built";
  };
  const auto expect_says = [](const std::string& error, const std::string& says) {
    EXPECT_NE(error.find(says), std::string::npos) << error;
  };
  expect_says(error_of("qwen3", [](auto& j) { j["partial_rotary_factor"] = 0.5; }), "\"partial_rotary_factor\"");
  expect_says(error_of("qwen3", [](auto& j) { j["use_sliding_window"] = true; }), "\"use_sliding_window\"");
  expect_says(error_of("phi3", [](auto& j) { j["rope_parameters"]["short_factor"] = {1.0, 2.0}; }), "\"short_factor\"");
  expect_says(error_of("phi3", [](auto& j) { j["partial_rotary_factor"] = 0.01; }), "\"partial_rotary_factor\"");
  expect_says(error_of("granite", [](auto& j) { j["attention_multiplier"] = 0; }), "\"attention_multiplier\"");
  expect_says(error_of("smollm3", [](auto& j) { j["no_rope_layers"] = {1, 0}; }), "\"no_rope_layers\"");
  expect_says(error_of("rope-yarn", [](auto& j) { j["rope_parameters"]["rope_type"] = "su"; }), "\"rope_type\"");
  expect_says(error_of("olmo2", [](auto& j) { j["pad_token_id"] = 1 << 20; }), "\"pad_token_id\"");
  expect_says(error_of("gemma2", [](auto& j) { j["layer_types"][1] = "chunked_attention"; }), "\"layer_types\"");
  expect_says(error_of("gemma2", [](auto& j) { j["layer_types"] = {"full_attention"}; }), "\"layer_types\"");
  expect_says(error_of("gemma2", [](auto& j) { j["use_bidirectional_attention"] = true; }),
              "\"use_bidirectional_attention\"");
  expect_says(error_of("gemma2", [](auto& j) { j["hidden_activation"] = "gelu"; }), "\"hidden_activation\"");
  expect_says(error_of("gemma2", [](auto& j) { j["attn_logit_softcapping"] = -1; }), "\"attn_logit_softcapping\"");
  expect_says(error_of("gemma2", [](auto& j) { j["query_pre_attn_scalar"] = 0; }), "\"query_pre_attn_scalar\"");
  expect_says(error_of("gemma3", [](auto& j) { j["rope_parameters"]["sliding_attention"]["rope_type"] = "yarn"; }),
              "\"rope_type\"");
  expect_says(error_of("gemma", [](auto& j) { j["hidden_act"] = "silu"; }), "\"hidden_act\"");
  expect_says(error_of("mixtral", [](auto& j) { j["router_jitter_noise"] = 0.1; }), "\"router_jitter_noise\"");
  expect_says(error_of("mixtral", [](auto& j) { j["num_experts_per_tok"] = 9; }), "\"num_experts_per_tok\"");
  expect_says(error_of("olmoe", [](auto& j) { j["clip_qkv"] = 8.0; }), "\"clip_qkv\"");
  expect_says(error_of("qwen3-moe", [](auto& j) { j["mlp_only_layers"] = {7}; }), "\"mlp_only_layers\"");
  EXPECT_EQ(error_of("phi3", [](auto&) {}), "built");
  EXPECT_EQ(error_of("gemma3", [](auto&) {}), "built");
  EXPECT_EQ(error_of("olmoe", [](auto&) {}), "built");
}

// Gemma 3 as older files write it (rope_theta, rope_local_base_freq and
// rope_scaling for the global layers; sliding_window_pattern rather than
// layer_types) is the fixture's model, as transformers reads both; Gemma 2
// with its caps null has none.
TEST(HfFolders, GemmaReadsOlderConfigLayoutsAsTransformersDoes) {
  auto logits_with = [](const char* fixture, const std::string& name,
                        const std::function<void(nlohmann::json&)>& edit) {
    auto dir = scratch_copy(fixture, name);
    edit_config(dir, edit);
    auto lm = models::load_hf_causal_lm(dir.string(), DType::f32);
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < 20; ++i) ids.push_back(3 + i * 17 % 400);  // past both windows
    return models::next_token_log_probabilities(*lm.model, ids);
  };
  const auto fixture = logits_with("gemma3", "fixture", [](nlohmann::json&) {});
  const auto older = logits_with("gemma3", "older", [](nlohmann::json& j) {
    j.erase("layer_types");
    j.erase("rope_parameters");
    j["sliding_window_pattern"] = 3;
    j["rope_theta"] = 1000000.0;
    j["rope_local_base_freq"] = 10000.0;
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  });
  EXPECT_EQ(fixture, older);
  const auto unscaled = logits_with("gemma3", "unscaled", [](nlohmann::json& j) {
    j["rope_parameters"]["full_attention"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  });
  EXPECT_NE(fixture, unscaled);
  const auto capped = logits_with("gemma2", "capped", [](nlohmann::json&) {});
  const auto uncapped = logits_with("gemma2", "uncapped", [](nlohmann::json& j) {
    j["attn_logit_softcapping"] = nullptr;
    j["final_logit_softcapping"] = nullptr;
  });
  EXPECT_NE(capped, uncapped);
}

// A decoding step's one token takes a shorter road through a mixture of
// experts (no gathers or scatter) and gives the general path's bits: with
// and without renormalised weights, for two experts a token and for three.
TEST(MixtureOfExperts, OneTokenWithoutGradientsGivesTheGeneralPathsBits) {
  for (const auto& [top_k, normalize] : {std::pair{int64_t(2), true}, {int64_t(3), false}, {int64_t(3), true}}) {
    Generator init(11);
    const models::MoeShape shape{24, 40, 5, top_k, normalize};
    models::MixtureOfExperts moe(shape, init);
    for (uint64_t seed : {1, 2, 3}) {
      Generator draw(seed);
      const Tensor x = nn::normal_tensor({1, 1, 24}, 1.0, draw);
      const Tensor general = moe.forward(x);  // gradients on: the general path
      Tensor short_road;
      {
        NoGradGuard ng;
        short_road = moe.forward(x);
      }
      EXPECT_EQ(short_road.shape(), general.shape());
      EXPECT_EQ(short_road.to_vector<float>(), general.to_vector<float>()) << top_k << " " << normalize << " " << seed;
    }
  }
}

// Mixtures of experts in the layouts files hold them: the hub's (per
// expert; Mixtral's block_sparse_moe with w1/w2/w3, as the fixture holds it)
// and fused ([experts, 2 x intermediate, hidden] gate_up_proj and down_proj
// under Kiln's names, as transformers 5 may save them) give the same model.
TEST(HfFolders, MixtureOfExpertsLoadsPerExpertAndFusedFiles) {
  for (const std::string fixture : {"mixtral", "qwen3-moe"}) {
    const fs::path dir = scratch_copy(fixture, "fused_" + fixture);
    auto per_expert = models::load_hf_causal_lm(dir.string(), DType::f32);
    // Kiln's parameters, with each layer's experts stacked as transformers 5 holds them.
    std::map<std::string, std::vector<Tensor>> gate_up, down;
    NamedTensors fused;
    for (const auto& [name, p] : per_expert.model->named_parameters()) {
      const size_t at = name.find(".mlp.experts.");
      if (at == std::string::npos) {
        fused.emplace_back(name, p.contiguous());
        continue;
      }
      const std::string layer = name.substr(0, at) + ".mlp.experts.";
      const size_t dot = name.find('.', at + 13);
      const int64_t e = std::stoll(name.substr(at + 13, dot - at - 13));
      const std::string proj = name.substr(dot + 1);
      auto& list = proj == "down_proj.weight" ? down[layer] : gate_up[layer];
      const int64_t slot = proj == "up_proj.weight" ? 2 * e + 1 : proj == "gate_proj.weight" ? 2 * e : e;
      if (int64_t(list.size()) <= slot) list.resize(size_t(slot + 1));
      list[size_t(slot)] = p.contiguous();
    }
    for (auto& [layer, parts] : gate_up) {  // each expert's gate rows, then its up rows
      std::vector<Tensor> experts;
      for (size_t e = 0; e < parts.size(); e += 2) experts.push_back(unsqueeze(cat({parts[e], parts[e + 1]}, 0), 0));
      fused.emplace_back(layer + "gate_up_proj", contiguous(cat(experts, 0)));
    }
    for (auto& [layer, parts] : down) {
      std::vector<Tensor> experts;
      for (const Tensor& p : parts) experts.push_back(unsqueeze(p, 0));
      fused.emplace_back(layer + "down_proj", contiguous(cat(experts, 0)));
    }
    save_safetensors((dir / "model.safetensors").string(), fused);
    auto from_fused = models::load_hf_causal_lm(dir.string(), DType::f32);
    const std::vector<int32_t> ids = {1, 5, 9, 13, 17, 21, 25};
    EXPECT_EQ(models::next_token_log_probabilities(*from_fused.model, ids),
              models::next_token_log_probabilities(*per_expert.model, ids))
        << fixture;
    // A fused tensor of the wrong rank is an error naming it.
    fused.back().second = reshape(fused.back().second, {-1});
    save_safetensors((dir / "model.safetensors").string(), fused);
    expect_error(dir, "fused experts are [experts");
  }
}

// SmolLM3 without no_rope_layers takes transformers' default: every
// no_rope_layer_interval-th layer (4) does not rotate.
TEST(HfFolders, SmolLm3DefaultsItsUnrotatedLayersFromTheInterval) {
  auto logits_with = [](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    auto dir = scratch_copy("smollm3", name);
    edit_config(dir, edit);
    auto lm = models::load_hf_causal_lm(dir.string(), DType::f32);
    return models::next_token_log_probabilities(*lm.model, {1, 5, 9, 13, 17});
  };
  const auto by_default = logits_with("interval", [](nlohmann::json& j) { j.erase("no_rope_layers"); });
  const auto explicit_list = logits_with("listed", [](nlohmann::json& j) { j["no_rope_layers"] = {1, 1, 1, 0, 1}; });
  const auto fixture_list = logits_with("fixture", [](nlohmann::json&) {});
  EXPECT_EQ(by_default, explicit_list);
  EXPECT_NE(by_default, fixture_list);
}

TEST(HfFolders, SampleWithIgnoreEosRunsToMaxTokens) {
  // A copy whose generation_config.json makes the third greedy token the end
  // of sequence: a sample stops before it; with ignore_eos it is never
  // sampled and the sample runs on (greedy: the stopped one is its prefix).
  const fs::path dir = scratch_copy("llama-gqa", "ignore_eos");
  std::vector<int32_t> greedy;
  {
    auto lm = models::load_hf_causal_lm(dir.string());
    Generator gen(1);
    const std::vector<int32_t> prompt = lm.tokenizer.encode("The best way");
    greedy = models::generate(*lm.model, prompt, 8, models::Sampling{.temperature = 0}, gen);
    greedy.erase(greedy.begin(), greedy.begin() + long(prompt.size()));
  }
  ASSERT_EQ(greedy.size(), 8u);
  std::ofstream(dir / "generation_config.json") << nlohmann::json{{"eos_token_id", greedy[2]}}.dump();
  recipes::SampleOptions o;
  o.prompt = "The best way", o.count = 1, o.max_tokens = 8, o.sampling.temperature = 0;
  const std::string stopped = recipes::sample("hf:" + dir.string(), o, Device::cpu()).at(0);
  o.ignore_eos = true;
  const std::string full = recipes::sample("hf:" + dir.string(), o, Device::cpu()).at(0);
  EXPECT_LT(stopped.size(), full.size());
  EXPECT_EQ(full.rfind(stopped, 0), 0u) << stopped << " | " << full;
  fs::remove_all(dir);
}

TEST(HfFolders, PromptLongerThanTheContextIsAClearError) {
  auto lm = models::load_hf_causal_lm(hf_test::fixture("gpt2"));
  std::vector<int32_t> prompt(size_t(lm.model->context_length()) + 1, 5);
  Generator gen(1);
  try {
    models::generate(*lm.model, prompt, 4, models::Sampling{.temperature = 0}, gen);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the model's context"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
