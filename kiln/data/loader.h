// Batch loaders: images for classification, token windows for language
// modelling. Each batch is a pure function of the loader's seed and a
// LoaderState, built ahead on a background thread (see prefetch.h), so
//   - the order of epoch e depends only on (seed, e);
//   - state() saved in a checkpoint and passed to set_state() later gives
//     bitwise the batches an uninterrupted run would have seen;
//   - prefetching on or off yields the same batches.
// A loader has one consumer thread.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/data/loader_state.h"
#include "kiln/data/prefetch.h"

namespace kiln::data {

// ---- images -----------------------------------------------------------------

struct ImageBatch {
  Tensor images;  // f32 [B, 1, H, W], (x/255 - mean) / std
  Tensor labels;  // i64 [B]
};

struct ImageLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;     // false: dataset order every epoch (evaluation)
  bool drop_last = false;  // true: skip an epoch's final partial batch
  uint64_t seed = 0;       // shuffle seed; epoch e's order depends only on (seed, e)
  int prefetch = 2;        // batches built ahead on a worker thread; 0 = none
  float mean = kFashionMnistMean;
  float std = kFashionMnistStd;
};

class ImageLoader {
 public:
  // Serves dataset rows `indices` (all rows when empty), e.g. Split::train.
  ImageLoader(const ImageDataset& dataset, std::vector<int64_t> indices, const ImageLoaderOptions& options);

  // The next batch; epochs follow each other without end.
  ImageBatch next();
  // Examples served per epoch and batches per epoch.
  int64_t size() const;
  int64_t batches_per_epoch() const;

  LoaderState state() const { return prefetcher_->state(); }
  // Throws when `s` does not fit this loader (position beyond the epoch).
  void set_state(const LoaderState& s);

  struct Source;  // the immutable data the worker reads; defined in loader.cpp

 private:
  std::shared_ptr<const Source> source_;
  std::unique_ptr<Prefetcher<ImageBatch>> prefetcher_;
};

// ---- token streams ----------------------------------------------------------

struct TokenBatch {
  Tensor x;  // i64 [B, T], inputs
  Tensor y;  // i64 [B, T], targets: the token after each input
};

struct TokenLoaderOptions {
  int64_t batch_size = 16;
  int64_t block_size = 128;  // T
  uint64_t seed = 0;
  int prefetch = 2;
};

// Concatenates documents[i] for i in `which` (all when empty), each preceded
// by `end_of_text`, so a model learns that a document starts after one:
// [eot, doc, eot, doc, ...].
std::vector<int32_t> concat_with_separator(const std::vector<std::vector<int32_t>>& documents,
                                           const std::vector<int64_t>& which, int32_t end_of_text);

// Training windows: batch k holds B windows of T+1 tokens at offsets drawn
// uniformly from a stream keyed by (seed, k); x is the first T tokens of each
// window, y the last T. There are no epochs: state().position == k.
class TokenLoader {
 public:
  TokenLoader(std::vector<int32_t> tokens, const TokenLoaderOptions& options);
  TokenBatch next();
  LoaderState state() const { return prefetcher_->state(); }
  void set_state(const LoaderState& s);
  int64_t num_tokens() const;

  struct Source;

 private:
  std::shared_ptr<const Source> source_;
  std::unique_ptr<Prefetcher<TokenBatch>> prefetcher_;
};

// Evaluation: non-overlapping windows at offsets 0, T, 2T, ..., in order and
// in batches of up to B (the last one may be smaller); next() returns nullopt
// after the last. Every token but the first is scored exactly once, except a
// tail of fewer than T tokens that fills no window.
class TokenValidationIterator {
 public:
  TokenValidationIterator(std::vector<int32_t> tokens, int64_t batch_size, int64_t block_size, int prefetch = 2);
  std::optional<TokenBatch> next();
  void reset();  // back to the first batch
  int64_t num_batches() const;
  int64_t num_windows() const;
  int64_t tokens_scored() const;  // num_windows() * T

  struct Source;

 private:
  std::shared_ptr<const Source> source_;
  std::unique_ptr<Prefetcher<TokenBatch>> prefetcher_;
};

}  // namespace kiln::data
