#pragma once
#include "apps/recipes/recipe.h"
#include "kiln/data/tokenizer.h"
#include "models/gpt/gpt.h"

namespace kiln::recipes {

// A token stream over some documents, and its bytes per token (to turn
// nats per token into bits per byte).
struct TextStream {
  std::vector<int32_t> tokens;
  double bytes_per_token = 1.0;
};

TextStream encode_documents(const data::Tokenizer& tok, const std::vector<std::string>& docs,
                            const std::vector<int64_t>& which);
// The fortunes validation split, encoded with `tok`.
TextStream fortunes_validation(const data::Tokenizer& tok, const std::string& data_dir = "");
// Mean loss in nats per token over the whole stream (weighted by tokens).
double validation_loss(models::Gpt& model, const std::vector<int32_t>& tokens, int64_t batch, Device device);

std::unique_ptr<Recipe> make_fortunes_gpt_recipe();
// Validation runs in batches of this many windows, or of the run's
// micro-batch when smaller (so a run fitted to its memory validates in it),
// in training and in `kiln eval` alike: both report the same bits for the
// same checkpoint.
inline constexpr int64_t kValidationBatch = 16;
int64_t validation_batch(int64_t micro_batch);
// The fortunes tokenizer, trained once on the `train` documents and cached.
data::Tokenizer fortunes_tokenizer(const std::vector<std::string>& docs, const std::vector<int64_t>& train,
                                   const std::string& cache_dir, int threads);
// The tokenizer a run saved beside its checkpoints.
data::Tokenizer load_run_tokenizer(const std::string& checkpoint_dir, const Checkpoint& ck);
// The run's GPT, its weights from the checkpoint, on `device`.
std::unique_ptr<models::Gpt> load_gpt(const Checkpoint& ck, Device device);
std::vector<std::string> sample_gpt(models::Gpt& model, const data::Tokenizer& tok, const std::string& prompt,
                                    int count, int64_t max_tokens, double temperature, int64_t top_k, Generator& gen);

}  // namespace kiln::recipes
