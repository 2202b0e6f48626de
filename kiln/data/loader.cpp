#include "kiln/data/loader.h"

#include <array>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "kiln/data/random.h"
#include "kiln/data/splits.h"

namespace kiln::data {

// ---- LoaderState <-> JSON ---------------------------------------------------

void to_json(nlohmann::json& j, const LoaderState& s) { j = {{"epoch", s.epoch}, {"position", s.position}}; }

void from_json(const nlohmann::json& j, LoaderState& s) {
  KILN_CHECK(j.is_object(), "loader state: expected a JSON object {\"epoch\": ..., \"position\": ...}, got ",
             j.dump());
  for (const char* key : {"epoch", "position"})
    KILN_CHECK(j.contains(key) && j.at(key).is_number_unsigned(), "loader state ", j.dump(), ": field \"", key,
               "\" is missing or not a non-negative integer");
  s.epoch = j.at("epoch").get<uint64_t>();
  s.position = j.at("position").get<uint64_t>();
}

// ---- images -----------------------------------------------------------------

struct ImageLoader::Source {
  Tensor images;  // u8 [N, H, W], shared with the dataset, never written
  Tensor labels;  // i64 [N]
  std::vector<int64_t> indices;
  ImageLoaderOptions options;
  std::array<float, 256> normalised{};  // pixel value -> network input

  // One permutation per epoch costs a pass over all indices; batches of the
  // same epoch share it.
  mutable std::mutex order_mutex;
  mutable uint64_t order_epoch = std::numeric_limits<uint64_t>::max();
  mutable std::shared_ptr<const std::vector<int64_t>> order;

  int64_t n() const { return int64_t(indices.size()); }
  int64_t batches_per_epoch() const {
    int64_t b = options.batch_size;
    return options.drop_last ? n() / b : (n() + b - 1) / b;
  }
  // A state past the epoch's last batch means the start of the next epoch.
  LoaderState normalise(LoaderState s) const {
    uint64_t end = options.drop_last ? uint64_t(n() / options.batch_size * options.batch_size) : uint64_t(n());
    if (s.position >= end) return {s.epoch + 1, 0};
    return s;
  }
  LoaderState advance(const LoaderState& s) const {
    return normalise({s.epoch, s.position + uint64_t(options.batch_size)});
  }
  std::shared_ptr<const std::vector<int64_t>> order_for(uint64_t epoch) const {
    std::lock_guard<std::mutex> lock(order_mutex);
    if (!order || order_epoch != epoch) {
      order = std::make_shared<const std::vector<int64_t>>(epoch_order(n(), options.seed, epoch));
      order_epoch = epoch;
    }
    return order;
  }
  ImageBatch make(const LoaderState& s) const {
    const int64_t begin = int64_t(s.position);
    const int64_t count = std::min(options.batch_size, n() - begin);
    const int64_t h = images.size(1), w = images.size(2), pixels = h * w;
    ImageBatch batch{Tensor::empty({count, 1, h, w}, DType::f32), Tensor::empty({count}, DType::i64)};
    std::shared_ptr<const std::vector<int64_t>> perm = options.shuffle ? order_for(s.epoch) : nullptr;
    const uint8_t* src = images.data<uint8_t>();
    const int64_t* label_src = labels.data<int64_t>();
    float* dst = batch.images.data<float>();
    int64_t* label_dst = batch.labels.data<int64_t>();
    for (int64_t i = 0; i < count; ++i) {
      int64_t k = begin + i;
      int64_t row = indices[size_t(perm ? (*perm)[size_t(k)] : k)];
      const uint8_t* p = src + row * pixels;
      float* q = dst + i * pixels;
      for (int64_t j = 0; j < pixels; ++j) q[j] = normalised[p[j]];
      label_dst[i] = label_src[row];
    }
    return batch;
  }
};

ImageLoader::ImageLoader(const ImageDataset& dataset, std::vector<int64_t> indices, const ImageLoaderOptions& o) {
  KILN_CHECK(dataset.images.defined() && dataset.images.dtype() == DType::u8 && dataset.images.dim() == 3 &&
                 dataset.images.is_contiguous() && dataset.images.device().is_cpu(),
             "ImageLoader: images must be a contiguous u8 [N, H, W] CPU tensor, got ", dataset.images.str());
  const int64_t rows = dataset.images.size(0);
  KILN_CHECK(dataset.labels.defined() && dataset.labels.dtype() == DType::i64 && dataset.labels.dim() == 1 &&
                 dataset.labels.size(0) == rows && dataset.labels.is_contiguous() && dataset.labels.device().is_cpu(),
             "ImageLoader: labels must be a contiguous i64 [", rows, "] CPU tensor, got ", dataset.labels.str());
  KILN_CHECK(o.batch_size > 0, "ImageLoader: batch_size must be positive, got ", o.batch_size);
  KILN_CHECK(o.std > 0, "ImageLoader: std must be positive, got ", o.std);
  auto src = std::make_shared<Source>();
  src->images = dataset.images;
  src->labels = dataset.labels;
  src->options = o;
  if (indices.empty()) {
    indices.resize(size_t(rows));
    for (int64_t i = 0; i < rows; ++i) indices[size_t(i)] = i;
  }
  for (int64_t i : indices)
    KILN_CHECK(i >= 0 && i < rows, "ImageLoader: index ", i, " is outside the dataset of ", rows, " images");
  src->indices = std::move(indices);
  KILN_CHECK(src->batches_per_epoch() > 0, "ImageLoader: ", src->n(), " examples make no batch of ", o.batch_size,
             o.drop_last ? " with drop_last" : "");
  for (int v = 0; v < 256; ++v) src->normalised[size_t(v)] = (float(v) / 255.0f - o.mean) / o.std;
  source_ = src;
  prefetcher_ = std::make_unique<Prefetcher<ImageBatch>>(
      [src](const LoaderState& s) { return src->make(s); }, [src](const LoaderState& s) { return src->advance(s); },
      nullptr, LoaderState{}, o.prefetch);
}

ImageBatch ImageLoader::next() { return *prefetcher_->next(); }
int64_t ImageLoader::size() const { return source_->n(); }
int64_t ImageLoader::batches_per_epoch() const { return source_->batches_per_epoch(); }

void ImageLoader::set_state(const LoaderState& s) {
  KILN_CHECK(s.position <= uint64_t(source_->n()), "ImageLoader: saved position ", s.position,
             " lies beyond an epoch of ", source_->n(), " examples; was the state saved with another dataset?");
  prefetcher_->reset(source_->normalise(s));
}

// ---- token streams ----------------------------------------------------------

std::vector<int32_t> concat_with_separator(const std::vector<std::vector<int32_t>>& documents,
                                           const std::vector<int64_t>& which, int32_t end_of_text) {
  std::vector<int32_t> out;
  auto append = [&](int64_t i) {
    KILN_CHECK(i >= 0 && i < int64_t(documents.size()), "concat_with_separator: document ", i,
               " does not exist (", documents.size(), " documents)");
    out.push_back(end_of_text);
    out.insert(out.end(), documents[size_t(i)].begin(), documents[size_t(i)].end());
  };
  if (which.empty()) {
    for (size_t i = 0; i < documents.size(); ++i) append(int64_t(i));
  } else {
    for (int64_t i : which) append(i);
  }
  return out;
}

namespace {
constexpr uint64_t kTokenWindowStream = 3;

// x and y of one window starting at `start`: T + 1 tokens, shifted by one.
void copy_window(const std::vector<int32_t>& tokens, int64_t start, int64_t t, int64_t* x, int64_t* y) {
  for (int64_t j = 0; j < t; ++j) {
    x[j] = tokens[size_t(start + j)];
    y[j] = tokens[size_t(start + j + 1)];
  }
}
}  // namespace

struct TokenLoader::Source {
  std::vector<int32_t> tokens;
  TokenLoaderOptions options;

  TokenBatch make(const LoaderState& s) const {
    const int64_t b = options.batch_size, t = options.block_size;
    TokenBatch batch{Tensor::empty({b, t}, DType::i64), Tensor::empty({b, t}, DType::i64)};
    // Counter-based: batch k's offsets depend only on (seed, k).
    SplitMix64 rng(derive_seed(derive_seed(options.seed, kTokenWindowStream), s.position));
    const uint64_t starts = uint64_t(tokens.size()) - uint64_t(t);  // start + t must be a valid index
    for (int64_t i = 0; i < b; ++i)
      copy_window(tokens, int64_t(rng.below(starts)), t, batch.x.data<int64_t>() + i * t,
                  batch.y.data<int64_t>() + i * t);
    return batch;
  }
};

TokenLoader::TokenLoader(std::vector<int32_t> tokens, const TokenLoaderOptions& o) {
  KILN_CHECK(o.batch_size > 0 && o.block_size > 0, "TokenLoader: batch_size and block_size must be positive, got ",
             o.batch_size, " and ", o.block_size);
  KILN_CHECK(int64_t(tokens.size()) > o.block_size, "TokenLoader: ", tokens.size(),
             " tokens hold no window of block_size + 1 = ", o.block_size + 1);
  auto src = std::make_shared<Source>();
  src->tokens = std::move(tokens);
  src->options = o;
  source_ = src;
  prefetcher_ = std::make_unique<Prefetcher<TokenBatch>>(
      [src](const LoaderState& s) { return src->make(s); },
      [](const LoaderState& s) { return LoaderState{s.epoch, s.position + 1}; }, nullptr, LoaderState{},
      o.prefetch);
}

TokenBatch TokenLoader::next() { return *prefetcher_->next(); }
int64_t TokenLoader::num_tokens() const { return int64_t(source_->tokens.size()); }

void TokenLoader::set_state(const LoaderState& s) {
  KILN_CHECK(s.epoch == 0, "TokenLoader: saved state has epoch ", s.epoch,
             ", but token streams have no epochs; was it saved by an image loader?");
  prefetcher_->reset(s);
}

struct TokenValidationIterator::Source {
  std::vector<int32_t> tokens;
  int64_t batch_size = 0, block_size = 0, windows = 0;

  int64_t num_batches() const { return (windows + batch_size - 1) / batch_size; }
  TokenBatch make(const LoaderState& s) const {
    const int64_t first = int64_t(s.position) * batch_size;
    const int64_t b = std::min(batch_size, windows - first), t = block_size;
    TokenBatch batch{Tensor::empty({b, t}, DType::i64), Tensor::empty({b, t}, DType::i64)};
    for (int64_t i = 0; i < b; ++i)
      copy_window(tokens, (first + i) * t, t, batch.x.data<int64_t>() + i * t, batch.y.data<int64_t>() + i * t);
    return batch;
  }
};

TokenValidationIterator::TokenValidationIterator(std::vector<int32_t> tokens, int64_t batch_size, int64_t block_size,
                                                 int prefetch) {
  KILN_CHECK(batch_size > 0 && block_size > 0,
             "TokenValidationIterator: batch_size and block_size must be positive, got ", batch_size, " and ",
             block_size);
  KILN_CHECK(int64_t(tokens.size()) > block_size, "TokenValidationIterator: ", tokens.size(),
             " validation tokens hold no window of block_size + 1 = ", block_size + 1);
  auto src = std::make_shared<Source>();
  src->windows = (int64_t(tokens.size()) - 1) / block_size;
  src->tokens = std::move(tokens);
  src->batch_size = batch_size;
  src->block_size = block_size;
  source_ = src;
  prefetcher_ = std::make_unique<Prefetcher<TokenBatch>>(
      [src](const LoaderState& s) { return src->make(s); },
      [](const LoaderState& s) { return LoaderState{s.epoch, s.position + 1}; },
      [src](const LoaderState& s) { return int64_t(s.position) >= src->num_batches(); }, LoaderState{}, prefetch);
}

std::optional<TokenBatch> TokenValidationIterator::next() { return prefetcher_->next(); }
void TokenValidationIterator::reset() { prefetcher_->reset(LoaderState{}); }
int64_t TokenValidationIterator::num_batches() const { return source_->num_batches(); }
int64_t TokenValidationIterator::num_windows() const { return source_->windows; }
int64_t TokenValidationIterator::tokens_scored() const { return source_->windows * source_->block_size; }

}  // namespace kiln::data
