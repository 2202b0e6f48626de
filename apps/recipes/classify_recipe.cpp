#include "apps/recipes/classify_recipe.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "apps/recipes/common.h"
#include "apps/recipes/gpt_recipe.h"
#include "apps/recipes/precision.h"
#include "apps/recipes/train_loop.h"
#include "kiln/data/fortunes.h"
#include "kiln/data/splits.h"
#include "kiln/distributed/world.h"
#include "kiln/io/atomic_file.h"
#include "models/gpt/text_classifier.h"

namespace kiln::recipes {

namespace {

constexpr int64_t kContext = 64;        // tokens per fortune (longer ones are cut)
constexpr int64_t kServedLengthStep = 16;  // served texts are padded to a multiple of this
constexpr double kTestFraction = 0.1;   // of the fortunes of the kept classes, held out

// The labelled fortunes of the kept classes, tokenised and cut to kContext.
struct Examples {
  std::vector<std::string> classes;           // sorted file names
  std::vector<std::vector<int32_t>> tokens;   // per example
  std::vector<int64_t> labels;
  data::Split split;                          // train / test (the split's "validation")
};

Examples prepare(const data::Tokenizer& tok, const std::vector<data::LabelledFortune>& all) {
  std::map<std::string, int64_t> counts;
  for (const auto& f : all) ++counts[f.source];
  Examples e;
  for (const auto& [name, n] : counts)
    if (n >= kMinFortunesPerClass) e.classes.push_back(name);
  KILN_CHECK(e.classes.size() >= 2, "fortunes-classify needs at least two fortunes files with ",
             kMinFortunesPerClass, " fortunes each; found ", e.classes.size());
  for (const auto& f : all) {
    auto it = std::find(e.classes.begin(), e.classes.end(), f.source);
    if (it == e.classes.end()) continue;
    std::vector<int32_t> ids = tok.encode(f.text);
    if (ids.empty()) continue;
    if (int64_t(ids.size()) > kContext) ids.resize(size_t(kContext));
    e.tokens.push_back(std::move(ids));
    e.labels.push_back(it - e.classes.begin());
  }
  e.split = data::split_documents(int64_t(e.tokens.size()), kTestFraction);
  return e;
}

// ids [rows, length], padded with pad_id after the text.
Tensor pad_batch(const std::vector<const std::vector<int32_t>*>& rows, int64_t pad_id, int64_t length = kContext) {
  std::vector<int64_t> ids(rows.size() * size_t(length), pad_id);
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy(rows[r]->begin(), rows[r]->end(), ids.begin() + long(r * size_t(length)));
  return Tensor::from_vector(ids, {int64_t(rows.size()), length});
}

Tensor batch_of(const Examples& e, const std::vector<int64_t>& which, int64_t pad_id) {
  std::vector<const std::vector<int32_t>*> rows;
  for (int64_t i : which) rows.push_back(&e.tokens[size_t(i)]);
  return pad_batch(rows, pad_id);
}

struct Accuracy {
  double model = 0, majority = 0;
};

Accuracy test_accuracy(models::TextClassifier& model, const Examples& e, Device device) {
  NoGradGuard ng;
  model.eval();
  const std::vector<int64_t>& test = e.split.validation;
  std::vector<int64_t> per_class(e.classes.size(), 0);
  int64_t right = 0;
  for (size_t first = 0; first < test.size(); first += 256) {
    std::vector<int64_t> which(test.begin() + long(first), test.begin() + long(std::min(test.size(), first + 256)));
    std::vector<int64_t> pred = argmax(model.forward(batch_of(e, which, model.pad_id()).to(device)), 1).to_vector<int64_t>();
    for (size_t i = 0; i < which.size(); ++i) right += pred[i] == e.labels[size_t(which[i])];
  }
  for (int64_t i : test) ++per_class[size_t(e.labels[size_t(i)])];
  model.train();
  return {double(right) / double(test.size()),
          double(*std::max_element(per_class.begin(), per_class.end())) / double(test.size())};
}

models::GptConfig classifier_config(int64_t tokenizer_vocab) {
  models::GptConfig c;
  c.vocab_size = tokenizer_vocab + 1;  // + the padding id
  c.block_size = kContext;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 128;
  c.dropout = 0.1;
  return c;
}

std::vector<std::string> saved_classes(const Checkpoint& ck) {
  KILN_CHECK(ck.state.contains("classes"), "this checkpoint names no classes in its state.json");
  return ck.state.at("classes").get<std::vector<std::string>>();
}

std::unique_ptr<models::TextClassifier> load_classifier(const Checkpoint& ck, Device device) {
  Generator init(0);
  auto model = std::make_unique<models::TextClassifier>(models::GptConfig::from_json(ck.state.at("config")),
                                                        int64_t(saved_classes(ck).size()), init,
                                                        std::make_shared<Generator>(0));
  model->load_parameters(to_pairs(ck.model));
  model->to(device);
  model->eval();
  return model;
}

// For kiln serve: texts in, class probabilities out.
class ClassifierInference final : public InferenceModel {
 public:
  ClassifierInference(std::unique_ptr<models::TextClassifier> model, data::Tokenizer tok,
                      std::vector<std::string> classes, Device device)
      : model_(std::move(model)), tok_(std::move(tok)), classes_(std::move(classes)), device_(device) {}
  std::vector<std::string> labels() const override { return classes_; }
  // Padded only to the request's longest text, rounded up to a multiple of
  // kServedLengthStep, not to kContext: a short text costs its own length
  // (the blocks are causal and padding follows the text, so the padding's
  // length does not change an answer). The rounding keeps the number of
  // product shapes, and so of oneDNN primitives made, small.
  Tensor encode_texts(const std::vector<std::string>& texts) override {
    std::vector<std::vector<int32_t>> ids;
    int64_t longest = 1;
    for (const std::string& t : texts) {
      ids.push_back(tok_.encode(t));
      if (int64_t(ids.back().size()) > kContext) ids.back().resize(size_t(kContext));
      longest = std::max(longest, int64_t(ids.back().size()));
    }
    std::vector<const std::vector<int32_t>*> rows;
    for (const auto& r : ids) rows.push_back(&r);
    const int64_t rounded = (longest + kServedLengthStep - 1) / kServedLengthStep * kServedLengthStep;
    const int64_t length = std::min(kContext, rounded);
    return pad_batch(rows, model_->pad_id(), length);
  }
  std::optional<int64_t> pad_token() const override { return model_->pad_id(); }
  Tensor classify_tokens(const Tensor& ids) override {
    NoGradGuard ng;
    return softmax(model_->forward(ids.to(device_)), 1).to(Device::cpu());
  }

 private:
  std::unique_ptr<models::TextClassifier> model_;
  data::Tokenizer tok_;
  std::vector<std::string> classes_;
  Device device_;
};

class FortunesClassifyRecipe final : public Recipe {
 public:
  std::string name() const override { return "fortunes-classify"; }
  std::string summary() const override {
    return "tell which fortunes file a fortune is from (people, computers, politics, ...) with a small transformer";
  }
  ModelKind kind() const override { return ModelKind::text_classifier; }
  int64_t default_batch_size() const override { return 32; }

  TrainResult train(const TrainOptions& o, const Log& log) const override {
    RecipeDefaults d;
    d.batch_size = default_batch_size();
    d.steps = 600;
    d.lr = 1e-3;
    const RunStart run = start_run(o, name(), d, log);
    const RunConfig& c = run.config;
    const std::vector<data::LabelledFortune> all = data::load_labelled_fortunes(o.data_dir);
    std::vector<std::string> texts;
    for (const auto& f : all) texts.push_back(f.text);
    std::optional<data::Tokenizer> loaded;  // the fortunes tokenizer (shared with fortunes-gpt's cache)
    distributed::rank0_first([&] {
      loaded.emplace(run.checkpoint ? load_run_tokenizer(run.checkpoint_dir, *run.checkpoint)
                                    : fortunes_tokenizer(texts, data::split_documents(int64_t(texts.size())).train,
                                                         o.cache_dir, o.threads.value_or(0)));
    });
    const data::Tokenizer& tok = *loaded;
    const Examples e = prepare(tok, all);
    const models::GptConfig config = classifier_config(tok.vocab_size());
    std::filesystem::create_directories(run.out_dir);
    if (distributed::is_rank0())
      write_file_atomic((std::filesystem::path(run.out_dir) / "tokenizer.model").string(), tok.serialized_model());

    auto dropout_gen = std::make_shared<Generator>(c.seed ^ 0xC1A55ull);
    Generator init(c.seed);
    models::TextClassifier model(config, int64_t(e.classes.size()), init, dropout_gen);
    optim::AdamWOptions adamw;
    adamw.weight_decay = 0.1;
    adamw.decay_matrices_only = true;
    std::unique_ptr<optim::Optimizer> opt = place_model_and_optimizer(c, run.device, model, adamw);
    MixedPrecision precision(c.precision, c.loss_scale);
    // Epochs over the training fortunes in a seeded order: (epoch, position) resumes exactly.
    data::LoaderState at;
    RunParts parts{model, *opt, precision, *dropout_gen, [&] { return at; },
                   [&](const data::LoaderState& s) { at = s; }};
    restore_run(run, parts, log);
    const std::vector<int64_t>& train = e.split.train;
    const int64_t B = c.batch_size;
    KILN_CHECK(B <= int64_t(train.size()), "--batch-size ", B, " is larger than the ", train.size(),
               " training fortunes");
    char head[256];
    std::snprintf(head, sizeof head, "%s: %zu classes, %zu training and %zu test fortunes, %lld parameters",
                  name().c_str(), e.classes.size(), train.size(), e.split.validation.size(),
                  (long long)model.parameter_count());
    log(head);

    LoopSettings settings;
    settings.warmup_steps = std::min<int64_t>(50, c.total_steps / 10);
    settings.clip_norm = 1.0;
    settings.unit = "txt";
    LoopHooks hooks;
    std::vector<int64_t> order;  // this epoch's visiting order, made once per epoch
    uint64_t order_epoch = 0;
    hooks.next_batch = [&] {
      if (int64_t(at.position) + B > int64_t(train.size())) at = {at.epoch + 1, 0};
      if (order.empty() || order_epoch != at.epoch) {
        order = data::epoch_order(int64_t(train.size()), c.seed, at.epoch);
        order_epoch = at.epoch;
      }
      std::vector<int64_t> which, labels;
      for (int64_t i = 0; i < B; ++i) {
        which.push_back(train[size_t(order[size_t(int64_t(at.position) + i)])]);
        labels.push_back(e.labels[size_t(which.back())]);
      }
      at.position += uint64_t(B);
      return Batch{batch_of(e, which, model.pad_id()), Tensor::from_vector(labels, {B})};
    };
    hooks.loss = [&](const Tensor& x, const Tensor& y) {
      return cross_entropy(model.forward(x.to(run.device)), y.to(run.device));
    };
    hooks.add_state = [&](nlohmann::json& state) {
      state["config"] = config.to_json();
      state["classes"] = e.classes;
      state["tokenizer"] = "tokenizer.model";
    };
    RunRecord record(run.out_dir, run.step(), record_devices(run));
    TrainResult result;
    if (run_training_loop(o, run, parts, settings, hooks, record, result, log)) {
      const Accuracy a = test_accuracy(model, e, run.device);
      result.test_accuracy = a.model;
      char set[160];
      std::snprintf(set, sizeof set, "%zu test fortunes, %zu classes; always guessing the largest class scores %.4f",
                    e.split.validation.size(), e.classes.size(), a.majority);
      result.test_set = set;
      record.eval(result.steps_done, {{"test_accuracy", a.model}, {"majority_baseline", a.majority}});
    }
    return result;
  }

  EvalResult evaluate(const Checkpoint& ck, const std::string& dir, Device device, const Log& log) const override {
    auto model = load_classifier(ck, device);
    const Examples e = prepare(load_run_tokenizer(dir, ck), data::load_labelled_fortunes());
    KILN_CHECK(e.classes == saved_classes(ck), "the fortunes files on this machine give other classes than the "
               "checkpoint was trained on");
    const Accuracy a = test_accuracy(*model, e, device);
    char line[128];
    std::snprintf(line, sizeof line, "majority-class baseline: %.4f", a.majority);
    log(line);
    EvalResult r;
    r.accuracy = a.model;
    return r;
  }

  std::unique_ptr<InferenceModel> load_for_inference(const Checkpoint& ck, const std::string& dir,
                                                     Device device) const override {
    return std::make_unique<ClassifierInference>(load_classifier(ck, device), load_run_tokenizer(dir, ck),
                                                 saved_classes(ck), device);
  }
};

}  // namespace

std::unique_ptr<Recipe> make_fortunes_classify_recipe() { return std::make_unique<FortunesClassifyRecipe>(); }

}  // namespace kiln::recipes
