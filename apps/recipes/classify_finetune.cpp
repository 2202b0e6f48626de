#include "apps/recipes/classify_finetune.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "apps/recipes/common.h"
#include "apps/recipes/export.h"
#include "apps/recipes/sft_data.h"
#include "apps/recipes/sft_model.h"
#include "apps/recipes/train_loop.h"
#include "kiln/data/random.h"
#include "kiln/distributed/world.h"
#include "models/common/sequence_classifier.h"
#include "models/hf/hf_export.h"
#include "models/hf/hf_model.h"

namespace kiln::recipes {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kPadding = -1;  // marks padding in a batch's ids; lengths come from it

// The run's settings, saved in every checkpoint ("classify").
struct ClassifySettings {
  std::string base, base_hash, data, val;
  std::vector<std::string> labels;  // id2label, in id order
  int64_t max_seq_len = 128;
  json to_json() const {
    return {{"base", base}, {"base_hash", base_hash}, {"data", data}, {"val", val}, {"labels", labels},
            {"max_seq_len", max_seq_len}};
  }
  static ClassifySettings from_json(const json& j) {
    KILN_CHECK(j.is_object() && j.contains("base"), "the checkpoint has no classifier settings (\"classify\")");
    return {j.at("base"), j.at("base_hash"), j.at("data"), j.value("val", std::string()), j.at("labels"),
            j.at("max_seq_len")};
  }
};

// The model being fine-tuned, either kind, behind one forward.
struct Classifier {
  std::shared_ptr<nn::Module> module;
  std::function<Tensor(const Tensor& ids, const std::vector<int64_t>& lengths)> forward;
  std::function<std::vector<int32_t>(const std::string&)> encode;
  std::string how;  // for the log
  int64_t max_positions = 0;
  std::string model_type;
  std::shared_ptr<models::LanguageModel> lm;  // a causal LM's body (null: a BERT-family classifier)
};

double initializer_range(const json& config) { return config.value("initializer_range", 0.02); }

// Builds the classifier over `s.base` for `s.labels`. A BERT-family model
// whose id2label names the same labels keeps its head (its ids mapped to the
// data's order); otherwise a new head is drawn.
Classifier build_classifier(ClassifySettings& s, uint64_t seed) {
  const json config = models::read_hf_config(s.base);
  Generator init(seed ^ 0xC1A55ull);
  Classifier c;
  c.max_positions = config.value("max_position_embeddings", config.value("n_positions", int64_t(512)));
  if (models::hf_model_kind(config) == "classifier") {
    auto hf = std::make_shared<models::HfClassifier>(models::load_hf_classifier(s.base, DType::f32));
    KILN_CHECK(!std::dynamic_pointer_cast<models::CausalLmClassifier>(hf->model), s.base,
               " is a causal language model with a classification head; fine-tune the language model it was made from "
               "(kiln train classify gives it a new head)");
    const std::set<std::string> mine(s.labels.begin(), s.labels.end()), theirs(hf->labels.begin(), hf->labels.end());
    if (mine == theirs) s.labels = hf->labels;  // the same labels: the head's rows keep the model's order
    if (mine != theirs) hf->model->replace_classifier(s.labels, initializer_range(config), init);
    c.how = mine == theirs ? hf->model_type + " with its own head" : hf->model_type + " with a new head";
    c.model_type = hf->model_type;
    c.module = hf->model;
    c.forward = [hf](const Tensor& ids, const std::vector<int64_t>& lengths) { return hf->model->forward(ids, lengths); };
    c.encode = [hf](const std::string& t) { return hf->tokenizer.encode(t); };
    return c;
  }
  auto lm = std::make_shared<models::HfCausalLm>(models::load_hf_causal_lm(s.base, DType::f32));
  const int64_t hidden = config.value("hidden_size", config.value("n_embd", int64_t(0)));
  auto head = std::make_shared<models::CausalLmClassifier>(lm->model, hidden, int64_t(s.labels.size()),
                                                           initializer_range(config), init);
  c.how = lm->model_type + " with a new head on its last token";
  c.model_type = lm->model_type;
  c.lm = lm->model;
  c.module = head;
  c.forward = [head, lm](const Tensor& ids, const std::vector<int64_t>& lengths) { return head->forward(ids, lengths); };
  c.encode = [lm](const std::string& t) { return lm->tokenizer.encode(t); };
  return c;
}

struct Encoded {
  std::vector<std::vector<int32_t>> ids;
  std::vector<int64_t> labels;
};

// Each row's label as its id in s.labels.
std::vector<int64_t> label_ids(const std::vector<LabelledText>& rows, const ClassifySettings& s,
                               const std::string& origin) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto it = std::find(s.labels.begin(), s.labels.end(), rows[i].label);
    KILN_CHECK(it != s.labels.end(), origin, ": example ", i + 1, "'s label '", rows[i].label,
               "' is not one the training data has");
    ids.push_back(it - s.labels.begin());
  }
  return ids;
}

Encoded encode(const std::vector<LabelledText>& rows, const Classifier& c, const ClassifySettings& s,
               const std::string& origin) {
  Encoded e;
  e.labels = label_ids(rows, s, origin);
  const int64_t limit = std::min(s.max_seq_len, c.max_positions);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<int32_t> ids = c.encode(rows[i].text);
    KILN_CHECK(!ids.empty(), origin, ": example ", i + 1, " has no tokens");
    if (int64_t(ids.size()) > limit) ids.resize(size_t(limit));
    e.ids.push_back(std::move(ids));
  }
  return e;
}

// Rows `which` of `e` padded with kPadding; targets their labels.
Batch batch_of(const Encoded& e, const std::vector<int64_t>& which) {
  size_t T = 1;
  for (int64_t i : which) T = std::max(T, e.ids[size_t(i)].size());
  std::vector<int64_t> x(which.size() * T, kPadding), y;
  for (size_t r = 0; r < which.size(); ++r) {
    const auto& ids = e.ids[size_t(which[r])];
    std::copy(ids.begin(), ids.end(), x.begin() + long(r * T));
    y.push_back(e.labels[size_t(which[r])]);
  }
  return {Tensor::from_vector<int64_t>(x, {int64_t(which.size()), int64_t(T)}),
          Tensor::from_vector<int64_t>(y, {int64_t(which.size())})};
}

// The classifier's logits for a padded batch (padding -> token 0, masked by lengths).
Tensor logits_of(const Classifier& c, const Tensor& x, Device device) {
  const int64_t B = x.size(0), T = x.size(1);
  std::vector<int64_t> ids = contiguous(x).to(Device::cpu()).to_vector<int64_t>(), lengths;
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    while (n < T && ids[size_t(b * T + n)] != kPadding) ++n;
    lengths.push_back(n);
  }
  for (int64_t& id : ids) id = id == kPadding ? 0 : id;
  return c.forward(Tensor::from_vector<int64_t>(ids, {B, T}).to(device), lengths);
}

struct Scores {
  double accuracy = 0, majority = 0;
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted]
};

Scores score(const Classifier& c, const Encoded& e, size_t L, int64_t majority_label, Device device) {
  NoGradGuard ng;
  c.module->eval();
  Scores s;
  s.confusion.assign(L, std::vector<int64_t>(L, 0));
  int64_t right = 0, majority = 0;
  for (size_t first = 0; first < e.ids.size(); first += 32) {
    std::vector<int64_t> which;
    for (size_t i = first; i < std::min(e.ids.size(), first + 32); ++i) which.push_back(int64_t(i));
    const std::vector<int64_t> predicted = argmax(logits_of(c, batch_of(e, which).x, device), 1).to(Device::cpu()).to_vector<int64_t>();
    for (size_t r = 0; r < which.size(); ++r) {
      const int64_t truth = e.labels[size_t(which[r])];
      right += predicted[r] == truth;
      majority += truth == majority_label;
      ++s.confusion[size_t(truth)][size_t(predicted[r])];
    }
  }
  c.module->train();
  s.accuracy = double(right) / double(e.ids.size());
  s.majority = double(majority) / double(e.ids.size());
  return s;
}

std::string confusion_text(const Scores& s, const std::vector<std::string>& labels) {
  std::string out = "confusion matrix (rows: true label, columns: predicted):\n";
  char cell[64];
  size_t width = 6;
  for (const auto& l : labels) width = std::max(width, l.size() + 1);
  std::snprintf(cell, sizeof cell, "%*s", int(width), "");
  out += cell;
  for (size_t j = 0; j < s.confusion.size(); ++j) {
    std::snprintf(cell, sizeof cell, "%6zu", j);
    out += cell;
  }
  out += "\n";
  for (size_t i = 0; i < s.confusion.size(); ++i) {
    std::snprintf(cell, sizeof cell, "%*s", int(width), (std::to_string(i) + " " + labels[i]).substr(0, width).c_str());
    out += cell;
    for (int64_t n : s.confusion[i]) {
      std::snprintf(cell, sizeof cell, "%6lld", (long long)n);
      out += cell;
    }
    out += "\n";
  }
  return out;
}

int64_t most_common(const std::vector<int64_t>& labels) {
  std::map<int64_t, int64_t> counts;
  for (int64_t l : labels) ++counts[l];
  return std::max_element(counts.begin(), counts.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
}

// A fine-tuned classifier run for kiln classify and kiln serve. Rows are
// padded with kPadding, which logits_of turns into each row's length.
class ClassifierRunInference final : public InferenceModel {
 public:
  ClassifierRunInference(Classifier c, ClassifySettings s, Device device)
      : c_(std::move(c)), s_(std::move(s)), device_(device) {
    c_.module->to(device);
    c_.module->eval();
  }
  std::vector<std::string> labels() const override { return s_.labels; }
  std::optional<int64_t> pad_token() const override { return kPadding; }
  Tensor encode_texts(const std::vector<std::string>& texts) override {
    std::vector<LabelledText> rows;
    for (const auto& t : texts) rows.push_back({t, s_.labels.front()});
    const Encoded e = encode(rows, c_, s_, "the request");
    std::vector<int64_t> all(e.ids.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
    return batch_of(e, all).x;
  }
  Tensor classify_tokens(const Tensor& ids) override {
    NoGradGuard ng;
    return softmax(to_dtype(logits_of(c_, ids, device_), DType::f32), -1).to(Device::cpu());
  }

 private:
  Classifier c_;
  ClassifySettings s_;
  Device device_;
};

// A checkpoint's classifier, its trained weights in place.
Classifier load_classifier(const Checkpoint& ck, ClassifySettings& s) {
  s = ClassifySettings::from_json(ck.state.value("classify", json()));
  KILN_CHECK(models::hf_weights_hash(s.base) == s.base_hash, "the base model ", s.base,
             " changed since the run trained on it; restore that base");
  Classifier c = build_classifier(s, 0);
  c.module->load_trainable_parameters(to_pairs(ck.model));
  return c;
}

// transformers' class for a causal LM with a sequence-classification head, by model_type.
const std::map<std::string, std::string> kSequenceClassifierClass = {
    {"llama", "LlamaForSequenceClassification"},
    {"mistral", "MistralForSequenceClassification"},
    {"qwen2", "Qwen2ForSequenceClassification"},
    {"gpt2", "GPT2ForSequenceClassification"},
};

class ClassifyFinetuneRecipe final : public Recipe {
 public:
  std::string name() const override { return "classify"; }
  std::string summary() const override {
    return "fine-tune a Hugging Face model (--init hf:DIR) as a text classifier on JSON Lines {\"text\", \"label\"} "
           "(--data): a BERT-family head, or a new head on a causal LM's last token";
  }
  ModelKind kind() const override { return ModelKind::text_classifier; }
  int64_t default_batch_size() const override { return 16; }

  TrainResult train(const TrainOptions& o, const Log& log) const override {
    const std::string out_dir = resolve_out_dir(o, name());
    const std::optional<nlohmann::json> saved = saved_run_state(o, out_dir);
    ClassifySettings s;
    if (saved) {
      s = ClassifySettings::from_json(saved->value("classify", json()));
      KILN_CHECK(o.data_file.empty() || absolute_path(o.data_file) == s.data, "--data differs from the resumed run's; "
                 "drop it to resume, or train into a new --out directory");
      KILN_CHECK(models::hf_weights_hash(s.base) == s.base_hash, "the base model ", s.base, " is not the one this "
                 "run trained on; resuming against a different base is refused");
    } else {
      KILN_CHECK(!o.init.empty(), "kiln train classify needs --init hf:DIR (a Hugging Face model folder) or a "
                 "fortunes-gpt run to fine-tune");
      KILN_CHECK(!o.data_file.empty(), "kiln train classify needs --data FILE.jsonl: {\"text\": ..., \"label\": ...} "
                 "a line");
      s.base = fine_tune_folder(o.init, out_dir, "base", log);
      s.base_hash = models::hf_weights_hash(s.base);
      s.data = absolute_path(o.data_file);
      s.val = o.val_file.empty() ? "" : absolute_path(o.val_file);
      s.max_seq_len = o.max_seq_len.value_or(128);
    }
    const std::vector<LabelledText> train_rows = read_labelled_file(s.data);
    if (!saved) {
      std::set<std::string> labels;
      for (const auto& r : train_rows) labels.insert(r.label);
      KILN_CHECK(labels.size() >= 2, s.data, " has ", labels.size(), " label; a classifier needs two or more");
      s.labels.assign(labels.begin(), labels.end());
    }
    const uint64_t seed = saved ? saved->at("seed").get<uint64_t>() : o.seed.value_or(1337);
    Classifier c = build_classifier(s, seed);
    const Encoded train_set = encode(train_rows, c, s, s.data);
    std::optional<Encoded> val_set;
    if (!s.val.empty()) val_set = encode(read_labelled_file(s.val), c, s, s.val);
    const int64_t n = int64_t(train_set.ids.size());

    RecipeDefaults d;
    d.batch_size = std::min<int64_t>(default_batch_size(), n);
    d.lr = 2e-5;
    d.epochs = 1;
    d.steps_per_epoch = [n](int64_t batch) { return std::max<int64_t>(1, n / batch); };
    const RunStart run = start_run(o, name(), d, log);
    const RunConfig& cfg = run.config;
    KILN_CHECK(cfg.batch_size <= n, "a batch of ", cfg.batch_size, " examples from ", n, "; use a smaller --batch-size");
    KILN_CHECK(cfg.checkpointing == "none", "kiln train classify does not checkpoint activations yet");

    auto dropout_gen = std::make_shared<Generator>(seed ^ 0xD0D0D0D0ull);
    c.module->use_dropout_generator(dropout_gen);  // the model's dropouts (config.json's), saved with the run
    optim::AdamWOptions adamw;
    adamw.weight_decay = 0.0;  // transformers' Trainer default
    std::unique_ptr<optim::Optimizer> opt = place_model_and_optimizer(cfg, run.device, *c.module, adamw);
    MixedPrecision precision(cfg.precision, cfg.loss_scale);
    data::LoaderState position;
    std::vector<int64_t> order;
    auto reorder = [&] { order = data::seeded_permutation(n, data::derive_seed(cfg.seed, position.epoch)); };
    RunParts parts{*c.module, *opt, precision, *dropout_gen, [&] { return position; },
                   [&](const data::LoaderState& st) { position = st; reorder(); }};
    reorder();
    restore_run(run, parts, log);
    const int64_t majority_label = most_common(train_set.labels);
    log("classify: " + s.base + " (" + c.how + "), " + std::to_string(s.labels.size()) + " labels, " +
        std::to_string(n) + " training examples, " + std::to_string(cfg.total_steps) + " steps of " +
        std::to_string(cfg.batch_size));

    LoopSettings settings;
    settings.clip_norm = 1.0;
    settings.unit = "ex";
    LoopHooks hooks;
    hooks.next_batch = [&] {
      if (position.position + uint64_t(cfg.batch_size) > uint64_t(n)) {
        position = {position.epoch + 1, 0};
        reorder();
      }
      const std::vector<int64_t> which(order.begin() + long(position.position),
                                       order.begin() + long(position.position) + cfg.batch_size);
      position.position += uint64_t(cfg.batch_size);
      return batch_of(train_set, which);
    };
    hooks.loss = [&](const Tensor& x, const Tensor& y) {
      return cross_entropy(to_dtype(logits_of(c, x, run.device), DType::f32), y.to(run.device));
    };
    hooks.add_state = [&](json& state) { state["classify"] = s.to_json(); };
    RunRecord record(run.out_dir, run.step(), record_devices(run));
    TrainResult result;
    const bool finished = run_training_loop(o, run, parts, settings, hooks, record, result, log);
    if (finished && val_set) {
      const Scores sc = score(c, *val_set, s.labels.size(), majority_label, run.device);
      result.test_accuracy = sc.accuracy;
      result.test_set = std::to_string(val_set->ids.size()) + " examples of " + s.val;
      log(confusion_text(sc, s.labels) + "majority-label baseline: " + std::to_string(sc.majority));
      record.eval(result.steps_done, {{"val_accuracy", sc.accuracy}, {"majority_baseline", sc.majority}});
    }
    return result;
  }

  EvalResult evaluate(const Checkpoint& ck, const std::string&, Device device, const Log& log) const override {
    ClassifySettings s;
    Classifier c = load_classifier(ck, s);
    c.module->to(device);
    const std::string file = s.val.empty() ? s.data : s.val;
    const Encoded e = encode(read_labelled_file(file), c, s, file);
    const int64_t majority_label = most_common(label_ids(read_labelled_file(s.data), s, s.data));
    const Scores sc = score(c, e, s.labels.size(), majority_label, device);
    log("evaluating on " + file + (s.val.empty() ? " (the run had no --val: its training examples)" : ""));
    log(confusion_text(sc, s.labels) + "majority-label baseline: " + std::to_string(sc.majority));
    EvalResult r;
    r.accuracy = sc.accuracy;
    return r;
  }

  std::unique_ptr<InferenceModel> load_for_inference(const Checkpoint& ck, const std::string&,
                                                     Device device) const override {
    ClassifySettings s;
    Classifier c = load_classifier(ck, s);
    return std::make_unique<ClassifierRunInference>(std::move(c), std::move(s), device);
  }
};

}  // namespace

std::unique_ptr<Recipe> make_classify_finetune_recipe() { return std::make_unique<ClassifyFinetuneRecipe>(); }

models::HfFolderContents classifier_as_hf(const Checkpoint& ck) {
  ClassifySettings s;
  const Classifier c = load_classifier(ck, s);
  models::HfFolderContents out = hf_folder_files(s.base);
  json id2label = json::object(), label2id = json::object();
  for (size_t i = 0; i < s.labels.size(); ++i) {
    id2label[std::to_string(i)] = s.labels[i];
    label2id[s.labels[i]] = int64_t(i);
  }
  out.config["id2label"] = id2label;
  out.config["label2id"] = label2id;
  if (!c.lm) {
    out.tensors = models::checkpoint_tensors(*c.module, c.model_type);
    return out;
  }
  const auto cls = kSequenceClassifierClass.find(c.model_type);
  KILN_CHECK(cls != kSequenceClassifierClass.end(), "no transformers class for a ", c.model_type, " classifier");
  out.config["architectures"] = json::array({cls->second});
  // transformers pools each row at its last token that is not padding.
  if (out.config.value("pad_token_id", json()).is_null()) out.config["pad_token_id"] = out.config.value("eos_token_id", json(0));
  for (auto& [name, t] : models::checkpoint_tensors(*c.lm, c.model_type))
    if (name != "lm_head.weight") out.tensors.emplace_back(name, t);
  for (const auto& [name, p] : c.module->named_parameters())
    if (name == "score.weight") out.tensors.emplace_back(name, p.detach().to(Device::cpu()).contiguous());
  return out;
}

}  // namespace kiln::recipes
