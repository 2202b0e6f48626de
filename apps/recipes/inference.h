// A trained model loaded for inference: what `kiln serve` runs. Each recipe
// loads its own kind from a checkpoint (Recipe::load_for_inference).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::recipes {

struct CompletionOptions {
  int64_t max_tokens = 64;
  double temperature = 0.8;
  int64_t top_k = 40;       // 0: the whole vocabulary
  double top_p = 1.0;       // nucleus: the smallest set of tokens whose probability reaches top_p
  uint64_t seed = 1;
  std::vector<std::string> stop;  // the completion ends before the first of these
};

struct Completion {
  std::string text;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string finish_reason;  // "stop" (a stop string or end of text) or "length"
};

class InferenceModel {
 public:
  virtual ~InferenceModel() = default;
  // Classifiers: the class names, in output order.
  virtual std::vector<std::string> labels() const { return {}; }
  // Image classifiers: pixels [N, 1, 28, 28] in [0, 1] -> class probabilities [N, classes].
  virtual Tensor classify_images(const Tensor& pixels);
  // Text classifiers: texts -> token ids [N, T] (padded), and ids -> class probabilities [N, classes].
  virtual Tensor encode_texts(const std::vector<std::string>& texts);
  virtual Tensor classify_tokens(const Tensor& ids);
  // Language models: continues `prompt`; `on_text` receives each new piece
  // of text as it is made (for streaming).
  virtual Completion complete(const std::string& prompt, const CompletionOptions& options,
                              const std::function<void(const std::string&)>& on_text);
};

}  // namespace kiln::recipes
