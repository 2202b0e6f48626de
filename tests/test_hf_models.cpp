// Hugging Face models loaded by Kiln against transformers: per-token
// log-probabilities (f32, within 1e-3), greedy generation (equal to
// generate(do_sample=False)), training's loss and gradients, and batches,
// for every architecture on the fixtures of tests/hf/make_fixtures.py; the
// classifiers' probabilities. How folders are read (and refused) is
// test_hf_folders.cpp's.
#include "apps/recipes/hf_inference.h"
#include "apps/recipes/recipe.h"
#include "hf_test_util.h"
#include "kiln/nn/init.h"
#include "kiln/nn/lora.h"
#include "models/hf/families.h"
#include "models/hf/hf_model.h"

namespace kiln {
namespace {

const char* const kCausal[] = {"gpt2",        "llama-gqa",    "llama-mqa-tied", "llama-bf16",    "mistral",
                                "qwen2",       "qwen3",        "olmo2",          "granite",       "smollm3",
                                "rope-linear", "rope-dynamic", "rope-yarn",      "rope-longrope", "phi3",
                                "gemma",       "gemma2",       "gemma3",         "gemma3-vision", "mixtral",
                                "qwen3-moe",   "olmoe"};

class CausalLms : public ::testing::TestWithParam<const char*> {};

TEST_P(CausalLms, LogProbabilitiesMatchTransformersInF32) {
  auto lm = models::load_hf_causal_lm(hf_test::fixture(GetParam()), DType::f32);
  const auto want = hf_test::expected(GetParam());
  const auto ids = want["ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(lm.tokenizer.encode(want["score_text"].get<std::string>()), ids);
  EXPECT_LT(hf_test::worst_difference(hf_test::logprobs(*lm.model, ids), want["logprobs_f32"]), 1e-3) << GetParam();
}

// A bf16 file stays bf16 and runs in bf16, each op rounded as PyTorch
// rounds it. Both engines then differ from the f32 answer by up to ~0.1 nat
// (rounding the residual stream); from each other by less than 0.05.
TEST(CausalLmsBf16, Bf16WeightsStayBf16AndMatchTransformersInBf16) {
  auto lm = models::load_hf_causal_lm(hf_test::fixture("llama-bf16"));
  for (const auto& p : lm.model->parameters()) ASSERT_EQ(p.dtype(), DType::bf16);
  const auto want = hf_test::expected("llama-bf16");
  const auto got = hf_test::logprobs(*lm.model, want["ids"].get<std::vector<int32_t>>());
  const double to_bf16 = hf_test::worst_difference(got, want["logprobs_native"]);
  EXPECT_LT(to_bf16, 0.05);
  std::printf("bf16: largest difference from transformers' bf16 %.4f, from its f32 %.4f\n", to_bf16,
              hf_test::worst_difference(got, want["logprobs_f32"]));
}

TEST_P(CausalLms, GreedyGenerationEqualsTransformersGenerate) {
  auto lm = models::load_hf_causal_lm(hf_test::fixture(GetParam()));
  const auto want = hf_test::expected(GetParam());
  const auto prompt = lm.tokenizer.encode(want["prompt"].get<std::string>());
  ASSERT_EQ(prompt, want["prompt_ids"].get<std::vector<int32_t>>());
  Generator gen(1);
  auto out = models::generate(*lm.model, prompt, 16, models::Sampling{.temperature = 0}, gen, lm.eos_ids);
  std::vector<int32_t> fresh(out.begin() + long(prompt.size()), out.end());
  EXPECT_EQ(fresh, want["greedy_ids"].get<std::vector<int32_t>>()) << GetParam();
}

// One training step against transformers': the loss, and each parameter's
// gradient (its norm and sum, which do not depend on GPT-2's transposed
// layout) within 1e-3 relative.
TEST_P(CausalLms, TrainingLossAndGradientsMatchTransformers) {
  auto lm = models::load_hf_causal_lm(hf_test::fixture(GetParam()), DType::f32);
  const auto want = hf_test::expected(GetParam());
  const auto ids = want["ids"].get<std::vector<int64_t>>();
  const int64_t T = int64_t(ids.size()) - 1;
  std::vector<int64_t> inputs(ids.begin(), ids.end() - 1), targets(ids.begin() + 1, ids.end());
  // In eval mode, as transformers computed them: GPT-2's dropout off.
  Tensor loss = lm.model->loss(Tensor::from_vector(inputs, {1, T}), Tensor::from_vector(targets, {1, T}));
  EXPECT_NEAR(loss.item(), want["train_loss"].get<double>(), 1e-4 * want["train_loss"].get<double>());
  loss.backward();
  const std::string type = models::read_hf_config(hf_test::fixture(GetParam()))["model_type"];
  const auto* family = models::find_causal_lm_family(type);
  size_t checked = 0;
  for (const auto& [name, p] : lm.model->named_parameters()) {
    // transformers' own names, which are Kiln's, or the checkpoint's where a file differs (GPT-2's, Mixtral's)
    const std::string hf_name = want["grads"].contains(name) ? name : family->checkpoint_name(name).name;
    ASSERT_TRUE(want["grads"].contains(hf_name)) << hf_name;
    // (an expert no token was routed to has no gradient: transformers' fused tensor holds zeros for it)
    const auto g = p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>(size_t(p.numel()), 0.0f);
    double norm = 0, sum = 0;
    for (float v : g) norm += double(v) * v, sum += v;
    norm = std::sqrt(norm);
    const double want_norm = want["grads"][hf_name]["norm"], want_sum = want["grads"][hf_name]["sum"];
    EXPECT_NEAR(norm, want_norm, 1e-3 * want_norm + 1e-7) << hf_name;
    EXPECT_NEAR(sum, want_sum, 1e-3 * std::abs(want_sum) + 1e-4 * want_norm) << hf_name;
    ++checked;
  }
  EXPECT_EQ(checked, want["grads"].size());
}

// Continuous batching: one decoding step for sequences of different lengths
// (past mistral's window too) in one pass gives each the logits it gets alone.
// Prompts joining together run as one padded batch (one of them continuing
// a cache that already holds positions): each row's logits, and the next
// decoding step from each cache, are those of the prompt run alone (on a
// second copy of the model, so no page is shared between the two).
TEST_P(CausalLms, BatchedPromptsEqualEachPromptAlone) {
  auto lm = models::load_hf_causal_lm(hf_test::fixture(GetParam()), DType::f32);
  auto alone_lm = models::load_hf_causal_lm(hf_test::fixture(GetParam()), DType::f32);
  NoGradGuard ng;
  auto prompt_of = [](int64_t length, int64_t salt) {
    std::vector<int64_t> p(static_cast<size_t>(length));
    for (int64_t i = 0; i < length; ++i) p[size_t(i)] = 3 + (i * 31 + length + salt) % 500;
    return p;
  };
  // A batch of fresh caches attends on its own keys; with one continuing, on the pages.
  for (bool continuing : {false, true}) {
    const std::vector<int64_t> held = prompt_of(10, 7);  // already in the last cache
    const int64_t salt = continuing ? 10 : 0;
    const std::vector<std::vector<int64_t>> prompts = {prompt_of(3, salt), prompt_of(40, salt + 1),
                                                       prompt_of(19, salt + 2), prompt_of(7, salt + 3)};
    std::vector<models::KvCache> together, alone;
    for (size_t b = 0; b < prompts.size(); ++b) {
      together.push_back(lm.model->new_cache());
      alone.push_back(alone_lm.model->new_cache());
    }
    if (continuing) {
      lm.model->forward_cached(Tensor::from_vector(held, {1, 10}), together.back());
      alone_lm.model->forward_cached(Tensor::from_vector(held, {1, 10}), alone.back());
    }
    std::vector<models::KvCache*> pointers;
    for (auto& c : together) pointers.push_back(&c);
    const auto batched = lm.model->forward_prompts(prompts, pointers).to_vector<float>();
    const size_t V = batched.size() / prompts.size();
    auto worst = [&](const std::vector<float>& a, const std::vector<float>& b, size_t row) {
      double w = 0;
      for (size_t i = 0; i < V; ++i) w = std::max(w, double(std::abs(a[i] - b[row * V + i])));
      return w;
    };
    for (size_t b = 0; b < prompts.size(); ++b) {
      const auto& p = prompts[b];
      const auto one =
          alone_lm.model->forward_cached(Tensor::from_vector(p, {1, int64_t(p.size())}), alone[b]).to_vector<float>();
      EXPECT_LT(worst(one, batched, b), 1e-4) << GetParam() << " prompt " << b;
      EXPECT_EQ(together[b].length(), alone[b].length());
    }
    const std::vector<int32_t> next = {11, 12, 13, 14};
    const auto step = lm.model->forward_decode(next, pointers).to_vector<float>();
    for (size_t b = 0; b < prompts.size(); ++b) {
      const auto one = alone_lm.model->forward_decode({next[b]}, {&alone[b]}).to_vector<float>();
      EXPECT_LT(worst(one, step, b), 1e-4) << GetParam() << " decoding after prompt " << b;
    }
  }
}

TEST_P(CausalLms, BatchedDecodingEqualsEachSequenceAlone) {
  auto lm = models::load_hf_causal_lm(hf_test::fixture(GetParam()), DType::f32);
  NoGradGuard ng;
  std::vector<models::KvCache> batch, alone;
  std::vector<int32_t> next;
  for (int64_t length : {3, 11, 17}) {
    std::vector<int64_t> prompt(static_cast<size_t>(length), 0);
    for (int64_t i = 0; i < length; ++i) prompt[size_t(i)] = 3 + (i * 31 + length) % 500;
    for (auto* caches : {&batch, &alone}) {
      caches->push_back(lm.model->new_cache());
      lm.model->forward_cached(Tensor::from_vector(prompt, {1, length}), caches->back());
    }
    next.push_back(int32_t(5 + length));
  }
  std::vector<models::KvCache*> pointers;
  for (auto& c : batch) pointers.push_back(&c);
  const auto together = lm.model->forward_decode(next, pointers).to_vector<float>();
  const size_t V = together.size() / next.size();
  for (size_t b = 0; b < next.size(); ++b) {
    const auto single = lm.model->forward_cached(Tensor::from_vector(std::vector<int64_t>{next[b]}, {1, 1}), alone[b])
                            .to_vector<float>();
    double worst = 0;
    for (size_t i = 0; i < V; ++i) worst = std::max(worst, double(std::abs(single[i] - together[b * V + i])));
    EXPECT_LT(worst, 1e-4) << GetParam() << " row " << b;
    EXPECT_EQ(batch[b].length(), alone[b].length());
  }
}

// f16 weights (converted here; a float16 file is kept as it is) run in f16
// and stay close to the f32 answer: f16 keeps 3 more mantissa bits than bf16.
TEST(CausalLmsF16, F16WeightsRunInF16) {
  auto lm = models::load_hf_causal_lm(hf_test::fixture("llama-gqa"), DType::f16);
  for (const auto& p : lm.model->parameters()) ASSERT_EQ(p.dtype(), DType::f16);
  const auto want = hf_test::expected("llama-gqa");
  const double worst = hf_test::worst_difference(hf_test::logprobs(*lm.model, want["ids"].get<std::vector<int32_t>>()),
                                                 want["logprobs_f32"]);
  EXPECT_LT(worst, 0.04);  // measured 0.019 (bf16 in bf16: 0.07)
  std::printf("f16: largest difference from transformers' f32 %.4f\n", worst);
}

// A fixture's name as a test name ("rope-yarn" -> "rope_yarn").
std::string fixture_test_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CausalLms, ::testing::ValuesIn(kCausal), fixture_test_name);

// The loaded modules train: a loss and its gradients, the same whether each
// layer keeps its activations or re-runs in backward.
TEST(HfTraining, LlamaGradientsAreTheSameWithBlockCheckpointing) {
  std::vector<std::vector<float>> grads[2];
  for (int blocks = 0; blocks < 2; ++blocks) {
    auto lm = models::load_hf_causal_lm(hf_test::fixture("mistral"), DType::f32);
    lm.model->train();
    if (blocks) lm.model->set_activation_checkpointing(models::ActivationCheckpointing::blocks);
    std::vector<int64_t> ids(2 * 20), targets(2 * 20);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(3 + (i * 37) % 600), targets[i] = int64_t(3 + (i * 53) % 600);
    Tensor loss = lm.model->loss(Tensor::from_vector(ids, {2, 20}), Tensor::from_vector(targets, {2, 20}));
    EXPECT_GT(loss.item(), 1.0);
    loss.backward();
    for (const auto& p : lm.model->parameters()) {
      ASSERT_TRUE(p.grad().defined());
      grads[blocks].push_back(p.grad().to_vector<float>());
    }
  }
  EXPECT_EQ(grads[0], grads[1]);
}

// Dropout replays in backward: with GPT-2's dropouts (its config's 0.1) or
// LoRA's on Mistral, the gradients are the same whether each layer keeps its
// activations or re-runs in backward (drawing the same masks again).
TEST(HfTraining, DropoutDrawsTheSameMasksWhenBlocksRerun) {
  for (const char* fixture : {"gpt2", "mistral"}) {
    std::vector<std::vector<float>> grads[2];
    double losses[2] = {0, 0}, eval_loss = 0;
    for (int blocks = 0; blocks < 2; ++blocks) {
      auto lm = models::load_hf_causal_lm(hf_test::fixture(fixture), DType::f32);
      if (std::string(fixture) == "mistral") {
        nn::LoraConfig lora;
        lora.rank = 4;
        lora.dropout = 0.3;
        lora.targets = {"q_proj", "v_proj", "down_proj"};
        Generator init(3);
        nn::apply_lora(*lm.model, lora, init, std::make_shared<Generator>(0));
        NoGradGuard ng;  // B away from its zero start, so that dropout shows in the loss too
        for (auto& [name, p] : nn::lora_parameters(*lm.model))
          if (name.ends_with("lora_B.weight")) copy_into(nn::normal_tensor(p.shape(), 0.05, init), p);
      }
      lm.model->use_dropout_generator(std::make_shared<Generator>(11));
      if (blocks) lm.model->set_activation_checkpointing(models::ActivationCheckpointing::blocks);
      std::vector<int64_t> ids(2 * 20), targets(2 * 20);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(3 + (i * 37) % 90), targets[i] = int64_t(3 + (i * 53) % 90);
      const Tensor x = Tensor::from_vector(ids, {2, 20}), y = Tensor::from_vector(targets, {2, 20});
      if (!blocks) {
        NoGradGuard ng;
        lm.model->eval();
        eval_loss = lm.model->loss(x, y).item();
      }
      lm.model->train();
      Tensor loss = lm.model->loss(x, y);
      losses[blocks] = loss.item();
      loss.backward();
      for (const auto& [name, p] : lm.model->trainable_parameters()) {
        ASSERT_TRUE(p.grad().defined()) << name;
        grads[blocks].push_back(p.grad().to_vector<float>());
      }
    }
    EXPECT_NE(losses[0], eval_loss) << fixture << ": dropout acted";
    EXPECT_EQ(losses[0], losses[1]) << fixture;
    EXPECT_EQ(grads[0], grads[1]) << fixture;
  }
}

class Classifiers : public ::testing::TestWithParam<const char*> {};

TEST_P(Classifiers, ProbabilitiesMatchTransformersWithin1e4) {
  auto c = models::load_hf_classifier(hf_test::fixture(GetParam()));
  const auto want = hf_test::expected(GetParam());
  EXPECT_EQ(c.labels, want["labels"].get<std::vector<std::string>>());
  for (const auto& row : want["texts"]) {
    EXPECT_EQ(c.tokenizer.encode(row["text"].get<std::string>()), row["ids"].get<std::vector<int32_t>>());
    const auto probs = models::classify_text(c, row["text"].get<std::string>());
    const auto expected_probs = row["probs"].get<std::vector<double>>();
    ASSERT_EQ(probs.size(), expected_probs.size());
    for (size_t i = 0; i < probs.size(); ++i) EXPECT_NEAR(probs[i], expected_probs[i], 1e-4) << row["text"];
  }
}

// Texts of different lengths in one padded batch (what kiln serve batches):
// the padding masked from attention, each row's probabilities are what the
// text gives alone, and transformers'.
TEST_P(Classifiers, ABatchOfDifferentLengthsGivesEachTextsOwnProbabilities) {
  auto served = recipes::load_hf_for_inference(hf_test::fixture(GetParam()), Device::cpu());
  const auto want = hf_test::expected(GetParam());
  std::vector<std::string> texts;
  for (const auto& row : want["texts"]) texts.push_back(row["text"].get<std::string>());
  const auto batch = served.model->classify_tokens(served.model->encode_texts(texts)).to_vector<float>();
  const size_t labels = want["labels"].size();
  ASSERT_EQ(batch.size(), texts.size() * labels);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto alone = served.model->classify_tokens(served.model->encode_texts({texts[i]})).to_vector<float>();
    for (size_t k = 0; k < labels; ++k) {
      EXPECT_NEAR(batch[i * labels + k], alone[k], 1e-5) << texts[i];
      EXPECT_NEAR(batch[i * labels + k], want["texts"][i]["probs"][k].get<double>(), 1e-4) << texts[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Classifiers,
                         ::testing::Values("bert", "distilbert", "roberta", "xlm-roberta", "modernbert"),
                         fixture_test_name);

}  // namespace
}  // namespace kiln
