// Fine-tuning (kiln train sft): the JSON Lines data and its loss masks, one
// batch's steps against transformers (+ peft) on the fixture the script
// made, LoRA's frozen base, merging, resuming, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "apps/recipes/recipe.h"
#include "apps/recipes/sft_data.h"
#include "apps/recipes/sft_loader.h"
#include "apps/recipes/sft_model.h"
#include "data_test_util.h"
#include "hf_test_util.h"
#include "kiln/backend/factory.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/distillation.h"
#include "kiln/nn/init.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/lora.h"
#include "models/hf/hf_export.h"
#include "run_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using recipes::SftEncoding;

struct Fixture {
  models::HfCausalLm lm = models::load_hf_causal_lm(hf_test::fixture("llama-gqa"));
  SftEncoding encoding() const {
    SftEncoding e;
    e.tokenizer = &lm.tokenizer;
    e.eos = lm.eos_ids.front();
    e.max_seq_len = 128;
    return e;
  }
};

using kiln_data_test::error_of;

TEST(SftData, EncodesAndMasksAsTrlDoes) {
  Fixture f;
  const json expected = hf_test::expected("finetune");
  const recipes::SftData data =
      recipes::read_sft_file(hf_test::fixture("finetune/train.jsonl"), f.encoding());
  ASSERT_EQ(data.examples.size(), expected["ids"].size());
  for (size_t i = 0; i < data.examples.size(); ++i) {
    const recipes::SftExample& e = data.examples[i];
    EXPECT_EQ(e.ids, expected["ids"][i].get<std::vector<int32_t>>()) << "example " << i;
    std::vector<int64_t> labels;
    for (size_t t = 0; t < e.ids.size(); ++t) labels.push_back(e.learn[t] ? e.ids[t] : -100);
    EXPECT_EQ(labels, expected["labels"][i].get<std::vector<int64_t>>()) << "example " << i;
  }
  // The batch's targets: the next token where it is learned, -100 elsewhere and in the padding.
  const recipes::SftLoader::Batch b = recipes::sft_batch(data.examples, 0, 2, 7);
  const int64_t T = b.x.size(1);
  const auto x = b.x.to_vector<int64_t>(), y = b.y.to_vector<int64_t>();
  int64_t counted = 0;
  for (int64_t r = 0; r < 2; ++r) {
    const recipes::SftExample& e = data.examples[size_t(r)];
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < int64_t(e.ids.size());
      EXPECT_EQ(x[size_t(r * T + t)], real ? e.ids[size_t(t)] : 7);
      const bool learned = t + 1 < int64_t(e.ids.size()) && e.learn[size_t(t + 1)];
      EXPECT_EQ(y[size_t(r * T + t)], learned ? e.ids[size_t(t + 1)] : -100);
      counted += learned;
    }
  }
  EXPECT_EQ(b.tokens, counted);
}

// --packing: every token and learned flag kept, in order, in rows of the
// given length; a row never learns an example's first token.
TEST(SftData, PackingKeepsEveryTokenAndLearnsNothingAcrossAnExamplesStart) {
  Fixture f;
  const recipes::SftData data = recipes::read_sft_file(hf_test::fixture("finetune/train.jsonl"), f.encoding());
  const std::vector<int64_t> order = {2, 0, 3, 1};
  const std::vector<recipes::SftExample> rows = recipes::pack_examples(data.examples, order, 16);
  std::vector<int32_t> packed, expected;
  std::vector<uint8_t> learned, expected_learned;
  std::vector<size_t> starts;  // where each example begins in the stream
  for (int64_t i : order) {
    starts.push_back(expected.size());
    const auto& e = data.examples[size_t(i)];
    expected.insert(expected.end(), e.ids.begin(), e.ids.end());
    expected_learned.insert(expected_learned.end(), e.learn.begin(), e.learn.end());
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(rows[r].ids.size(), r + 1 < rows.size() ? 16u : (expected.size() - 1) % 16 + 1);
    packed.insert(packed.end(), rows[r].ids.begin(), rows[r].ids.end());
    learned.insert(learned.end(), rows[r].learn.begin(), rows[r].learn.end());
  }
  EXPECT_EQ(packed, expected);
  EXPECT_EQ(learned, expected_learned);
  for (size_t start : starts) EXPECT_EQ(learned[start], 0) << "an example's first token is learned at " << start;
  const recipes::SftLoader::Batch b = recipes::sft_batch(rows, 0, rows.size(), 0);
  const auto y = b.y.to_vector<int64_t>();
  const int64_t T = b.x.size(1);
  for (size_t start : starts) {
    if (start % 16 == 0) continue;  // a row's first token: nothing in the row predicts it
    EXPECT_EQ(y[size_t(int64_t(start / 16) * T + int64_t(start % 16) - 1)], -100) << start;
  }
}

TEST(SftData, ConversationsLearnTheAssistantTurnsOnly) {
  Fixture f;
  const text::ChatTemplate chatml = text::chat_template_named("chatml");
  SftEncoding enc = f.encoding();
  enc.chat = &chatml;
  const json line = json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "A fortune cookie."},
      {"role": "user", "content": "And?"}, {"role": "assistant", "content": "Crumbs."}]})");
  const recipes::SftExample e = recipes::encode_sft_example(line, enc);
  std::vector<int32_t> learned, all = e.ids;
  std::string pieces;
  for (size_t t = 0; t < e.ids.size(); ++t) {
    if (e.learn[t]) learned.push_back(e.ids[t]);
    if (e.learn[t] && (t + 1 == e.ids.size() || !e.learn[t + 1])) {
      pieces += f.lm.tokenizer.decode(learned, false) + "|";
      learned.clear();
    }
  }
  EXPECT_EQ(pieces, "A fortune cookie.<|im_end|>\n|Crumbs.<|im_end|>\n|");
  // The pieces together are the whole rendered conversation, tokenised piece by piece.
  const std::vector<text::ChatMessage> messages = {{"system", "Be brief."}, {"user", "Who are you?"},
                                                   {"assistant", "A fortune cookie."}, {"user", "And?"},
                                                   {"assistant", "Crumbs."}};
  EXPECT_EQ(f.lm.tokenizer.decode(all, false), chatml.render(messages, false));
}

TEST(SftData, BadLinesNameTheFileTheLineAndTheProblem) {
  Fixture f;
  const SftEncoding enc = f.encoding();
  auto error = [&](const std::string& text) {
    return error_of([&] { recipes::parse_sft_lines(text, "data.jsonl", enc); });
  };
  EXPECT_NE(error("{\"text\": \"ok\"}\n{\"text\": 3}\n").find("data.jsonl:2: \"text\" must be a string"),
            std::string::npos);
  EXPECT_NE(error("\n{\"prompt\": \"a\"}\n").find("data.jsonl:2: no \"completion\" field"), std::string::npos);
  EXPECT_NE(error("{\"text\": \"ok\"}\n{not json\n").find("data.jsonl:2: "), std::string::npos);
  EXPECT_NE(error("[1, 2]\n").find("data.jsonl:1: a line must be a JSON object"), std::string::npos);
  EXPECT_NE(error("{\"label\": 1}\n").find("needs \"text\", \"prompt\" and \"completion\", or \"messages\""),
            std::string::npos);
  EXPECT_NE(error("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n").find("need a chat template"),
            std::string::npos);
  EXPECT_NE(error("\n\n").find("holds no example"), std::string::npos);
  // A prompt that fills --max-seq-len leaves nothing to learn: left out, and counted.
  SftEncoding short_enc = enc;
  short_enc.max_seq_len = 4;
  const recipes::SftData d = recipes::parse_sft_lines(
      "{\"prompt\": \"a long prompt of many words here\", \"completion\": \"x\"}\n{\"text\": \"one two three four "
      "five\"}\n", "d", short_enc);
  EXPECT_EQ(d.skipped, 1);
  EXPECT_EQ(d.truncated, 2);
  ASSERT_EQ(d.examples.size(), 1u);
  EXPECT_EQ(d.examples[0].ids.size(), 4u);
}

// The largest elementwise difference, leaving out `skipped` elements.
double largest_difference(const Tensor& a, const Tensor& b, const std::set<int64_t>& skipped = {}) {
  const auto x = a.to(DType::f32).contiguous().to_vector<float>(), y = b.to(DType::f32).contiguous().to_vector<float>();
  double diff = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (!skipped.count(int64_t(i))) diff = std::max(diff, std::abs(double(x[i]) - double(y[i])));
  return diff;
}

double largest_magnitude(const Tensor& t) {
  double m = 0;
  for (float v : t.to(DType::f32).contiguous().to_vector<float>()) m = std::max(m, std::abs(double(v)));
  return m;
}

// The largest elementwise difference over b's largest magnitude.
double relative_difference(const Tensor& a, const Tensor& b) {
  return largest_difference(a, b) / std::max(largest_magnitude(b), 1e-12);
}

std::vector<double> run_losses(const fs::path& out) {
  std::vector<double> losses;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (const json j = json::parse(line); j["kind"] == "train") losses.push_back(j["loss"].get<double>());
  return losses;
}

// Checks a run's trained weights against PyTorch's after the same steps:
// every element to 1e-5 of the tensor's largest (or 1e-4 of a step, for a
// tensor that started at zero), except those whose f32
// gradient is below the resolution of its sum (the fixture script lists
// them: 0 < |g| < 1e-7, their sign rounding noise), which AdamW's first
// steps move by up to lr either way, in PyTorch as here: they are held to
// that bound. An attention key's bias is all such (softmax ignores a shift
// every key shares, so its exact gradient is zero); other such elements
// must stay rare. Returns the elements compared.
int64_t expect_weights_match(const std::map<std::string, Tensor>& mine, const std::map<std::string, Tensor>& theirs,
                             const json& unresolved, const std::function<std::string(const std::string&)>& key_of) {
  const double lr = hf_test::expected("finetune")["lr"].get<double>();
  int64_t compared = 0, loose = 0;
  for (const auto& [name, t] : mine) {
    const std::string key = key_of(name);
    EXPECT_TRUE(theirs.count(key)) << key;
    if (!theirs.count(key)) continue;
    std::set<int64_t> skipped;
    if (unresolved.contains(key)) skipped = unresolved[key].get<std::set<int64_t>>();
    // Relative to the tensor's largest element; a tensor that started at zero
    // (a bias) holds only the updates, whose rounding is held to 1e-4 of a step.
    EXPECT_LE(largest_difference(t, theirs.at(key), skipped), std::max(1e-5 * largest_magnitude(theirs.at(key)), 1e-4 * lr))
        << name;
    const auto x = t.contiguous().to_vector<float>(), y = theirs.at(key).contiguous().to_vector<float>();
    for (int64_t i : skipped) EXPECT_LE(std::abs(x[size_t(i)] - y[size_t(i)]), 2 * lr) << name << "[" << i << "]";
    compared += t.numel();
    if (!key.ends_with("key.bias")) loose += int64_t(skipped.size());
  }
  EXPECT_LE(loose, compared / 10000) << "too many elements with unresolved gradients for the comparison to mean much";
  return compared;
}

recipes::TrainOptions parity_options(const fs::path& out, const std::string& lora_case) {
  const json expected = hf_test::expected("finetune");
  recipes::TrainOptions o;
  o.recipe = "sft";
  o.init = "hf:" + hf_test::fixture("llama-gqa");
  o.data_file = hf_test::fixture("finetune/train.jsonl");
  o.batch_size = expected["batch_size"].get<int64_t>();
  o.steps = expected["steps"].get<int64_t>();
  o.lr = expected["lr"].get<double>();
  o.threads = 1;
  o.progress = false;
  o.out_dir = out.string();
  if (!lora_case.empty()) o.lora_from = hf_test::fixture("finetune/" + lora_case + "-init");
  return o;
}

// Two steps on the fixture's batch: the same losses and the same weights as
// transformers (+ peft) with the same AdamW, clipping and schedule.
void expect_parity_with_transformers(const std::string& which) {
  const fs::path out = testing::fresh_test_dir("sft", which);
  recipes::train(parity_options(out, which == "full" ? "" : which), [](const std::string&) {});
  const json expected = hf_test::expected("finetune")["cases"][which];
  const std::vector<double> losses = run_losses(out), want = expected["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), want.size());
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_LE(std::abs(losses[i] - want[i]) / want[i], 1e-5) << which << " step " << i + 1 << ": " << losses[i]
                                                              << " vs " << want[i];
  const Checkpoint ck = load_checkpoint(*latest_checkpoint(out.string()));
  const auto after = load_safetensors(hf_test::fixture("finetune/" + which + "-after.safetensors")).tensors;
  EXPECT_EQ(ck.model.size(), after.size()) << "the checkpoint holds the trained weights only";
  EXPECT_EQ(expect_weights_match(ck.model, after, expected["unresolved"],
                                 [&](const std::string& n) { return which == "full" ? n : models::peft_name(n, "llama"); }),
            expected["trainable"].get<int64_t>());
  for (const auto& [name, t] : ck.optimizer)
    EXPECT_TRUE(which == "full" || nn::is_lora_parameter(name.substr(0, name.rfind('.'))))
        << "optimizer state for a frozen weight: " << name;
}

TEST(SftParity, FullFineTuneStepsMatchTransformers) { expect_parity_with_transformers("full"); }
TEST(SftParity, LoraOnQueriesAndValuesMatchesPeft) { expect_parity_with_transformers("lora-qv"); }
TEST(SftParity, LoraOnAllLinearLayersMatchesPeft) { expect_parity_with_transformers("lora-all"); }

TEST(Lora, BaseStaysFrozenAndMergingGivesTheSameLogits) {
  Fixture f;
  models::LanguageModel& model = *f.lm.model;
  const nn::NamedTensors before = model.named_parameters();
  std::vector<Tensor> base_copies;
  for (const auto& [n, p] : before) base_copies.push_back(p.contiguous().to(Device::cpu()).clone());
  nn::LoraConfig config;
  config.rank = 4;
  config.alpha = 8;
  config.targets = {"all-linear"};
  Generator init(3);
  const auto adapted = nn::apply_lora(model, config, init, nullptr);
  EXPECT_EQ(adapted.size(), 14u);  // 7 linears in each of 2 layers; not the head
  for (const auto& [n, p] : model.named_parameters()) EXPECT_EQ(p.requires_grad(), nn::is_lora_parameter(n)) << n;
  // B starts at zero, so the adapted model answers as the base; give B values.
  for (auto& [n, p] : nn::lora_parameters(model))
    if (n.ends_with("lora_B.weight")) copy_into(nn::normal_tensor(p.shape(), 0.2, init), p);
  const Tensor ids = Tensor::from_vector<int64_t>({0, 41, 471, 80, 535, 13, 288}, {1, 7});
  const Tensor targets = Tensor::from_vector<int64_t>({41, 471, 80, 535, 13, 288, 1}, {1, 7});
  Tensor loss = model.loss(ids, targets);
  loss.backward();
  for (const auto& [n, p] : model.named_parameters())
    EXPECT_EQ(p.grad().defined(), nn::is_lora_parameter(n)) << "gradient of " << n;
  model.eval();
  Tensor adapted_logits;
  {
    NoGradGuard ng;
    adapted_logits = model.forward(ids).to(Device::cpu());
  }
  nn::merge_lora(model);
  EXPECT_TRUE(nn::lora_parameters(model).empty());
  NoGradGuard ng;
  EXPECT_LE(relative_difference(model.forward(ids), adapted_logits), 1e-5);
  // The untargeted parameters are untouched (the embedding, norms, head).
  const nn::NamedTensors merged = model.named_parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i].first.find("proj") != std::string::npos) continue;
    EXPECT_EQ(relative_difference(merged[i].second, base_copies[i]), 0.0) << before[i].first;
  }
}

TEST(Lora, TargetsThatMatchNothingAreRefusedWithTheLayersThereAre) {
  Fixture f;
  nn::LoraConfig config;
  config.targets = {"q_proj", "c_attn"};
  Generator init(1);
  const std::string e = error_of([&] { nn::apply_lora(*f.lm.model, config, init, nullptr); });
  EXPECT_NE(e.find("LoRA target 'c_attn' names no linear layer"), std::string::npos) << e;
  EXPECT_NE(e.find("q_proj"), std::string::npos) << e;
  EXPECT_NE(error_of([] { nn::parse_lora_targets("q_proj,,v_proj"); }).find("empty name"), std::string::npos);
}

// Trains `whole` (4 steps), then the same run stopped after 2 and resumed
// into `parts`: both end with the same weights, bit for bit. Returns the
// uninterrupted run's last checkpoint.
Checkpoint expect_resumed_run_equals_uninterrupted(const recipes::TrainOptions& whole, const fs::path& parts) {
  recipes::train(whole, [](const std::string&) {});
  recipes::TrainOptions part = whole;
  part.out_dir = parts.string();
  part.stop_after = 2;
  recipes::train(part, [](const std::string&) {});
  recipes::TrainOptions rest;
  rest.recipe = whole.recipe;
  rest.out_dir = part.out_dir;
  rest.resume = true;
  rest.threads = 1;
  rest.progress = false;
  recipes::train(rest, [](const std::string&) {});
  const Checkpoint a = load_checkpoint(*latest_checkpoint(whole.out_dir)), b = load_checkpoint(*latest_checkpoint(part.out_dir));
  EXPECT_EQ(a.step, 4);
  EXPECT_EQ(b.step, 4);
  for (const auto& [name, t] : a.model) EXPECT_EQ(relative_difference(b.model.at(name), t), 0.0) << name;
  return a;
}

// A copy of a fixture folder with config.json's `keys` set to `value`.
fs::path fixture_with(const std::string& name, const fs::path& dir, const std::vector<std::string>& keys, double value) {
  hf_test::copy_fixture(name, dir);
  hf_test::edit_config(dir, [&](json& config) {
    for (const std::string& key : keys) config[key] = value;
  });
  return dir;
}

// kiln train classify on the BERT fixture: two steps equal transformers'
// (its own head: the data's labels are the model's), whose steps ran with
// dropout off (from_pretrained(hidden_dropout_prob=0, ...)): here the
// fixture's config.json says 0 too.
TEST(ClassifyParity, BertStepsMatchTransformers) {
  const json want = hf_test::expected("finetune")["classify"];
  const fs::path out = testing::fresh_test_dir("sft", "classify");
  recipes::TrainOptions o;
  o.recipe = "classify";
  o.init = "hf:" + fixture_with(want["base"].get<std::string>(), out.parent_path() / "classify-base",
                                {"hidden_dropout_prob", "attention_probs_dropout_prob"}, 0.0).string();
  o.data_file = hf_test::fixture("finetune/classify.jsonl");
  o.batch_size = want["batch_size"].get<int64_t>();
  o.steps = 2;
  o.lr = hf_test::expected("finetune")["lr"].get<double>();
  o.threads = 1;
  o.progress = false;
  o.out_dir = out.string();
  std::string log;
  recipes::train(o, [&](const std::string& line) { log += line + "\n"; });
  EXPECT_NE(log.find("bert with its own head"), std::string::npos) << log;
  const std::vector<double> losses = run_losses(out), expected = want["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), expected.size());
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_LE(std::abs(losses[i] - expected[i]) / expected[i], 1e-5) << i;
  const Checkpoint ck = load_checkpoint(*latest_checkpoint(out.string()));
  const auto after = load_safetensors(hf_test::fixture("finetune/classify-after.safetensors")).tensors;
  EXPECT_EQ(expect_weights_match(ck.model, after, want["unresolved"], [](const std::string& n) { return n; }),
            want["trainable"].get<int64_t>());
  EXPECT_EQ(ck.state["classify"]["labels"], json({"negative", "neutral", "positive"}));
}

// The BERT fixture's own dropouts (config.json's 0.1) act in its steps and
// draw from the run's generator, which resuming restores: a run stopped
// halfway and resumed ends with the uninterrupted run's weights.
TEST(ClassifyRuns, ResumedRunWithDropoutEqualsTheUninterruptedOne) {
  const fs::path dir = testing::fresh_test_dir("sft", "classify-resume");
  recipes::TrainOptions whole;
  whole.recipe = "classify";
  whole.init = "hf:" + hf_test::fixture("bert");
  whole.data_file = hf_test::fixture("finetune/classify.jsonl");
  whole.batch_size = 2;
  whole.steps = 4;
  whole.threads = 1;
  whole.progress = false;
  whole.out_dir = (dir / "whole").string();
  const Checkpoint a = expect_resumed_run_equals_uninterrupted(whole, dir / "parts");
  // Dropout acted: the same steps without it train other weights.
  recipes::TrainOptions off = whole;
  off.init = "hf:" + fixture_with("bert", dir / "no-dropout", {"hidden_dropout_prob", "attention_probs_dropout_prob"},
                                  0.0).string();
  off.out_dir = (dir / "off").string();
  recipes::train(off, [](const std::string&) {});
  const Checkpoint c = load_checkpoint(*latest_checkpoint(off.out_dir));
  EXPECT_GT(relative_difference(c.model.at("classifier.weight"), a.model.at("classifier.weight")), 1e-6);
}

// The distillation loss of the fixture's batch, student llama-gqa and
// teacher qwen2 (which share a tokenizer), equals PyTorch's formula.
TEST(Distillation, LossEqualsPyTorchsFormula) {
  const json want = hf_test::expected("finetune")["distill"];
  Fixture f;
  const recipes::SftData data = recipes::read_sft_file(hf_test::fixture("finetune/train.jsonl"), f.encoding());
  const recipes::SftLoader::Batch b = recipes::sft_batch(data.examples, 0, data.examples.size(), f.lm.eos_ids.front());
  models::HfCausalLm teacher = models::load_hf_causal_lm(hf_test::fixture(want["teacher"].get<std::string>()));
  Tensor teacher_logits;
  {
    NoGradGuard ng;
    teacher_logits = teacher.model->forward(b.x);
  }
  const nn::DistillationLoss d = nn::distillation_loss(f.lm.model->forward(b.x), teacher_logits, b.y,
                                                       want["temperature"].get<double>(), want["alpha"].get<double>());
  EXPECT_NEAR(d.kl, want["kl"].get<double>(), 1e-5 * want["kl"].get<double>());
  EXPECT_NEAR(d.hard, want["hard"].get<double>(), 1e-5 * want["hard"].get<double>());
  EXPECT_NEAR(d.loss.item(), want["loss"].get<double>(), 1e-5 * want["loss"].get<double>());
  // Gradients reach the student only.
  d.loss.backward();
  for (const auto& [name, p] : f.lm.model->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  for (const auto& [name, p] : teacher.model->named_parameters()) EXPECT_FALSE(p.grad().defined()) << name;
  // alpha 0 is the plain loss; a teacher of another vocabulary is refused.
  EXPECT_NEAR(nn::distillation_loss(f.lm.model->forward(b.x), teacher_logits, b.y, 2.0, 0.0).loss.item(),
              f.lm.model->loss(b.x, b.y).item(), 1e-6);
  EXPECT_NE(error_of([&] { nn::distillation_loss(f.lm.model->forward(b.x), slice(teacher_logits, 2, 0, 5), b.y, 2, 0.5); })
                .find("do not match the student's"),
            std::string::npos);
}

TEST(SftRuns, ResumingAgainstADifferentBaseIsRefused) {
  const fs::path dir = testing::fresh_test_dir("sft", "different-base");
  const fs::path base = hf_test::copy_fixture("llama-gqa", dir / "base");
  recipes::TrainOptions o = parity_options(dir / "run", "lora-qv");
  o.init = "hf:" + base.string();
  o.stop_after = 1;
  recipes::train(o, [](const std::string&) {});
  // Change one weight of the base.
  auto weights = load_safetensors((base / "model.safetensors").string()).tensors;
  Tensor& norm = weights.at("model.norm.weight");
  norm = norm.contiguous().clone();
  norm.data<float>()[0] += 1.0f;
  save_safetensors((base / "model.safetensors").string(), {weights.begin(), weights.end()});
  recipes::TrainOptions resume;
  resume.out_dir = o.out_dir;
  resume.resume = true;
  resume.recipe = "sft";
  resume.progress = false;
  const std::string e = error_of([&] { recipes::train(resume, [](const std::string&) {}); });
  EXPECT_NE(e.find("resuming against a different base is refused"), std::string::npos) << e;
  // A different setting given again is refused by name.
  resume.lora_rank = 8;
  EXPECT_NE(error_of([&] { recipes::train(resume, [](const std::string&) {}); }).find("--lora-rank differs"),
            std::string::npos);
}

// A Hugging Face model loads for inference; the steps still train with
// dropout (no --val, whose evaluation used to switch training mode on).
TEST(SftRuns, LoraDropoutActsOnEveryStep) {
  const fs::path dir = testing::fresh_test_dir("sft", "lora-dropout");
  const std::vector<double> want = hf_test::expected("finetune")["cases"]["lora-qv"]["losses"].get<std::vector<double>>();
  recipes::TrainOptions o = parity_options(dir / "off", "lora-qv");
  o.lora_dropout = 0.0;
  recipes::train(o, [](const std::string&) {});
  EXPECT_NEAR(run_losses(o.out_dir).at(1), want[1], 1e-5 * want[1]) << "dropout 0 is peft's step";
  o = parity_options(dir / "on", "lora-qv");
  o.lora_dropout = 0.5;
  recipes::train(o, [](const std::string&) {});
  // The fixture's adapters start non-zero (init_lora_weights=False), so
  // dropout on their input changes step 1's loss already.
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_GT(std::abs(run_losses(o.out_dir).at(i) - want[i]), 1e-4 * want[i]) << "step " << i + 1;
  EXPECT_EQ(load_checkpoint(*latest_checkpoint(o.out_dir)).state["sft"]["lora"]["dropout"], 0.5);
  o = parity_options(dir / "alpha", "lora-qv");
  o.lora_alpha = 3.0;
  EXPECT_NE(error_of([&] { recipes::train(o, [](const std::string&) {}); }).find("come from --lora-from"),
            std::string::npos);
}

TEST(SftRuns, ResumedRunEqualsTheUninterruptedOne) {
  for (const bool packing : {false, true}) {
    const fs::path dir = testing::fresh_test_dir("sft", packing ? "resume-packed" : "resume");
    recipes::TrainOptions whole = parity_options(dir / "whole", "lora-all");
    whole.steps = 4;
    whole.batch_size = 2;
    whole.packing = packing;
    whole.max_seq_len = 12;
    whole.lora_dropout = 0.1;  // the dropout generator resumes too
    const Checkpoint a = expect_resumed_run_equals_uninterrupted(whole, dir / "parts");
    EXPECT_EQ(a.state["sft"]["packing"], packing);
  }
}

}  // namespace
}  // namespace kiln
