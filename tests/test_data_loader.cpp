// Tests for kiln/data splits, shuffles and loaders: the PRNG against an
// independent reference, deterministic splits, batch contents, save/restore
// giving bitwise the same batches, and the prefetch thread's error handling
// and shutdown.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "kiln/data/loader.h"
#include "kiln/data/random.h"
#include "kiln/data/splits.h"
#include "data_test_util.h"

using namespace kiln;
using namespace kiln::data;
using namespace kiln_data_test;

// ---- PRNG, splits and shuffles ----------------------------------------------

TEST(DataSplits, PrngMatchesReference) {
  // splitmix64 seeded with 0: the published first outputs.
  SplitMix64 r(0);
  EXPECT_EQ(r.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(r.next(), 0x6E789E6AA1B965F4ull);
  // Fisher-Yates over this generator, from an independent Python version.
  EXPECT_EQ(seeded_permutation(10, 42), (std::vector<int64_t>{0, 9, 5, 8, 6, 4, 7, 2, 1, 3}));
  EXPECT_EQ(seeded_permutation(7, 0), (std::vector<int64_t>{6, 3, 1, 5, 4, 0, 2}));
  // below(n) is unbiased enough to see: each of 3 buckets gets about a third.
  SplitMix64 u(7);
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 30000; ++i) counts[size_t(u.below(3))]++;
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

TEST(DataSplits, SplitIsDeterministicDisjointAndComplete) {
  Split s = split_indices(60000, kFashionMnistValidationSize);
  ASSERT_EQ(s.validation.size(), 5000u);
  ASSERT_EQ(s.train.size(), 55000u);
  EXPECT_TRUE(std::is_sorted(s.train.begin(), s.train.end()));
  EXPECT_TRUE(std::is_sorted(s.validation.begin(), s.validation.end()));
  std::vector<int64_t> all(s.train);
  all.insert(all.end(), s.validation.begin(), s.validation.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 60000; ++i) ASSERT_EQ(all[size_t(i)], i);
  Split again = split_indices(60000, 5000);
  EXPECT_EQ(again.validation, s.validation);
  EXPECT_NE(split_indices(60000, 5000, 1).validation, s.validation);
  // Spread over the file, not a block at one end.
  EXPECT_LT(s.validation.front(), 100);
  EXPECT_GT(s.validation.back(), 59900);

  Split docs = split_documents(15000);
  EXPECT_EQ(docs.validation.size(), 750u);
  EXPECT_EQ(split_documents(3, 0.05).validation.size(), 1u);  // never silently empty
  EXPECT_TRUE(contains(error_of([] { split_indices(10, 11); }), "cannot hold out 11 of 10"));
}

TEST(DataSplits, EpochOrderDependsOnlyOnSeedAndEpoch) {
  std::vector<int64_t> e0 = epoch_order(1000, 5, 0), e1 = epoch_order(1000, 5, 1);
  EXPECT_EQ(epoch_order(1000, 5, 0), e0);
  EXPECT_NE(e0, e1);
  EXPECT_NE(epoch_order(1000, 6, 0), e0);
  std::vector<int64_t> sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[size_t(i)], i);
  // Later epochs are computed directly, without replaying earlier ones.
  EXPECT_EQ(epoch_order(1000, 5, 123456789), epoch_order(1000, 5, 123456789));
}

// ---- loaders ------------------------------------------------------------------------

namespace {

// n images of 2x3 pixels; pixel j of image i is 10*i + j and its label is i,
// so every batch says exactly which rows it holds.
ImageDataset tiny_images(int64_t n) {
  ImageDataset d;
  d.images = Tensor::empty({n, 2, 3}, DType::u8);
  d.labels = Tensor::empty({n}, DType::i64);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 6; ++j) d.images.data<uint8_t>()[i * 6 + j] = uint8_t(10 * i + j);
    d.labels.data<int64_t>()[i] = i;
  }
  d.num_classes = n;
  return d;
}

std::vector<int64_t> labels_of(const ImageBatch& b) {
  const int64_t* p = b.labels.data<int64_t>();
  return std::vector<int64_t>(p, p + b.labels.numel());
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

}  // namespace

TEST(DataLoader, ImageBatchesNormaliseAndCoverEachEpoch) {
  ImageDataset d = tiny_images(10);
  ImageLoaderOptions o;
  o.batch_size = 4;
  o.seed = 11;
  ImageLoader loader(d, {}, o);
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    for (int64_t b = 0; b < 3; ++b) {
      EXPECT_EQ(loader.state(), (LoaderState{uint64_t(epoch), uint64_t(4 * b)}));
      ImageBatch batch = loader.next();
      ASSERT_EQ(batch.images.shape(), (Shape{b < 2 ? 4 : 2, 1, 2, 3}));
      std::vector<int64_t> rows = labels_of(batch);
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t j = 0; j < 6; ++j) {
          double expected = ((10.0 * double(rows[i]) + double(j)) / 255.0 - 0.2860) / 0.3530;
          ASSERT_NEAR(batch.images.data<float>()[i * 6 + size_t(j)], expected, 1e-5);
        }
      seen.insert(seen.end(), rows.begin(), rows.end());
    }
    std::vector<int64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})) << "epoch " << epoch;
    // The visiting order is the documented one: epoch_order over the indices.
    EXPECT_EQ(seen, epoch_order(10, 11, uint64_t(epoch)));
  }
}

TEST(DataLoader, DropLastSubsetAndNoShuffle) {
  ImageDataset d = tiny_images(10);
  ImageLoaderOptions o;
  o.batch_size = 3;
  o.drop_last = true;
  o.shuffle = false;
  ImageLoader loader(d, {1, 3, 5, 7, 9, 8, 6}, o);
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  EXPECT_EQ(labels_of(loader.next()), (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(labels_of(loader.next()), (std::vector<int64_t>{7, 9, 8}));
  EXPECT_EQ(loader.state(), (LoaderState{1, 0}));  // the partial batch {6} is dropped
  EXPECT_EQ(labels_of(loader.next()), (std::vector<int64_t>{1, 3, 5}));
  EXPECT_TRUE(contains(error_of([&] { ImageLoader(d, {0, 1}, o); }), "make no batch"));
  EXPECT_TRUE(contains(error_of([&] { ImageLoader(d, {0, 10}, o); }), "index 10"));
  EXPECT_TRUE(contains(error_of([&] { loader.set_state({0, 8}); }), "beyond an epoch of 7"));
}

TEST(DataLoader, ImageSaveRestoreGivesSameBatches) {
  ImageDataset d = tiny_images(10);
  ImageLoaderOptions o;
  o.batch_size = 4;
  o.seed = 3;
  ImageLoader uninterrupted(d, {}, o);
  std::vector<ImageBatch> reference;
  for (int i = 0; i < 12; ++i) reference.push_back(uninterrupted.next());

  ImageLoader first(d, {}, o);
  for (int i = 0; i < 5; ++i) first.next();
  nlohmann::json saved = first.state();
  EXPECT_EQ(saved, (nlohmann::json{{"epoch", 1}, {"position", 8}}));
  std::string text = saved.dump();

  ImageLoaderOptions sync = o;
  sync.prefetch = 0;  // restoring into a loader without prefetching: same stream
  ImageLoader resumed(d, {}, sync);
  resumed.set_state(nlohmann::json::parse(text).get<LoaderState>());
  for (int i = 5; i < 12; ++i) {
    ImageBatch b = resumed.next();
    ASSERT_TRUE(same_bytes(b.images, reference[size_t(i)].images)) << "batch " << i;
    ASSERT_TRUE(same_bytes(b.labels, reference[size_t(i)].labels)) << "batch " << i;
  }
  // Rewinding a prefetching loader drops what it had queued.
  for (int i = 0; i < 3; ++i) first.next();
  first.set_state(saved.get<LoaderState>());
  ASSERT_TRUE(same_bytes(first.next().images, reference[5].images));
}

TEST(DataLoader, RealFashionMnistBatch) {
  Split split = split_indices(60000, kFashionMnistValidationSize);
  ImageLoaderOptions o;
  o.batch_size = 128;
  o.shuffle = false;
  ImageLoader val(real_train(), split.validation, o);
  EXPECT_EQ(val.size(), 5000);
  EXPECT_EQ(val.batches_per_epoch(), 40);
  ImageBatch b = val.next();
  ASSERT_EQ(b.images.shape(), (Shape{128, 1, 28, 28}));
  // Row 0 of the batch is dataset image split.validation[0], normalised.
  const uint8_t* raw = real_train().images.data<uint8_t>() + split.validation[0] * 784;
  for (int j = 0; j < 784; ++j)
    ASSERT_NEAR(b.images.data<float>()[j], (raw[j] / 255.0 - 0.2860) / 0.3530, 1e-5);
  EXPECT_EQ(b.labels.data<int64_t>()[0], real_train().labels.data<int64_t>()[split.validation[0]]);
}

TEST(DataLoader, DestroyingMidEpochStopsPrefetchThread) {
  ImageLoaderOptions o;
  o.batch_size = 2048;  // slow enough that the worker is busy when we leave
  o.prefetch = 4;
  auto start = std::chrono::steady_clock::now();
  {
    ImageLoader never_used(real_train(), {}, o);
  }
  for (int i = 0; i < 5; ++i) {
    ImageLoader loader(real_train(), {}, o);
    loader.next();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);

  // A worker stuck building a slow batch is joined once that batch is done.
  std::atomic<int> built{0};
  start = std::chrono::steady_clock::now();
  {
    Prefetcher<int> p([&](const LoaderState& s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ++built;
      return int(s.position);
    }, [](const LoaderState& s) { return LoaderState{0, s.position + 1}; }, nullptr, {}, 8);
    EXPECT_EQ(p.next(), 0);
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);
  EXPECT_LE(built.load(), 9);
}

TEST(DataLoader, WorkerExceptionsReachTheConsumer) {
  std::atomic<int> failures{0};
  for (int depth : {0, 3}) {
    failures = 0;
    Prefetcher<int> p([&](const LoaderState& s) {
      if (s.position == 3 && failures++ == 0) KILN_FAIL("disk on fire at batch 3");
      return int(s.position);
    }, [](const LoaderState& s) { return LoaderState{0, s.position + 1}; }, nullptr, {}, depth);
    EXPECT_EQ(p.next(), 0);
    EXPECT_EQ(p.next(), 1);
    EXPECT_EQ(p.next(), 2);
    EXPECT_TRUE(contains(error_of([&] { p.next(); }), "disk on fire")) << "depth " << depth;
    EXPECT_EQ(p.state(), (LoaderState{0, 3}));
    EXPECT_EQ(p.next(), 3);  // retried
    EXPECT_EQ(p.next(), 4);
  }
}

TEST(DataLoader, TokenWindowsAreShiftedSlices) {
  std::vector<int32_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);
  TokenLoaderOptions o;
  o.batch_size = 4;
  o.block_size = 8;
  o.seed = 9;
  TokenLoader loader(tokens, o);
  int64_t lo = 1000, hi = 0;
  for (int k = 0; k < 200; ++k) {
    TokenBatch b = loader.next();
    ASSERT_EQ(b.x.shape(), (Shape{4, 8}));
    ASSERT_EQ(b.y.shape(), (Shape{4, 8}));
    for (int r = 0; r < 4; ++r) {
      const int64_t* x = b.x.data<int64_t>() + r * 8;
      const int64_t* y = b.y.data<int64_t>() + r * 8;
      ASSERT_GE(x[0], 0);
      ASSERT_LE(x[0] + 8, 999);  // the target of the last input exists
      lo = std::min(lo, x[0]);
      hi = std::max(hi, x[0]);
      for (int t = 0; t < 8; ++t) {
        ASSERT_EQ(x[t], x[0] + t);
        ASSERT_EQ(y[t], x[t] + 1);
      }
    }
  }
  EXPECT_LT(lo, 50);
  EXPECT_GT(hi, 940);
  EXPECT_EQ(loader.state(), (LoaderState{0, 200}));
}

TEST(DataLoader, TokenSaveRestoreAndSeeds) {
  std::vector<int32_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 37 % 1000);
  TokenLoaderOptions o;
  o.batch_size = 3;
  o.block_size = 16;
  o.seed = 1;
  TokenLoader a(tokens, o);
  std::vector<TokenBatch> reference;
  for (int i = 0; i < 10; ++i) reference.push_back(a.next());

  TokenLoaderOptions sync = o;
  sync.prefetch = 0;
  TokenLoader b(tokens, sync);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(same_bytes(b.next().x, reference[size_t(i)].x));
  nlohmann::json saved = b.state();
  TokenLoader c(tokens, o);
  c.set_state(saved.get<LoaderState>());
  for (int i = 4; i < 10; ++i) {
    TokenBatch batch = c.next();
    ASSERT_TRUE(same_bytes(batch.x, reference[size_t(i)].x)) << i;
    ASSERT_TRUE(same_bytes(batch.y, reference[size_t(i)].y)) << i;
  }
  TokenLoaderOptions other = o;
  other.seed = 2;
  EXPECT_FALSE(same_bytes(TokenLoader(tokens, other).next().x, reference[0].x));
  EXPECT_TRUE(contains(error_of([&] { c.set_state({1, 0}); }), "no epochs"));
  EXPECT_TRUE(contains(error_of([&] { TokenLoader(std::vector<int32_t>(16, 0), o); }), "no window"));
}

TEST(DataLoader, ValidationIteratorCoversTokensInOrder) {
  std::vector<int32_t> tokens(101);
  std::iota(tokens.begin(), tokens.end(), 0);
  TokenValidationIterator it(tokens, 5, 8);
  EXPECT_EQ(it.num_windows(), 12);  // 100 targets / 8
  EXPECT_EQ(it.num_batches(), 3);
  EXPECT_EQ(it.tokens_scored(), 96);
  for (int pass = 0; pass < 2; ++pass) {
    int64_t window = 0;
    std::vector<int64_t> sizes;
    while (std::optional<TokenBatch> b = it.next()) {
      sizes.push_back(b->x.size(0));
      for (int64_t r = 0; r < b->x.size(0); ++r, ++window)
        for (int t = 0; t < 8; ++t) {
          ASSERT_EQ(b->x.data<int64_t>()[r * 8 + t], window * 8 + t);
          ASSERT_EQ(b->y.data<int64_t>()[r * 8 + t], window * 8 + t + 1);
        }
    }
    EXPECT_EQ(sizes, (std::vector<int64_t>{5, 5, 2}));
    EXPECT_FALSE(it.next().has_value());
    it.reset();
  }
}

TEST(DataLoader, ConcatWithSeparator) {
  std::vector<std::vector<int32_t>> docs = {{5, 6}, {7}, {}};
  EXPECT_EQ(concat_with_separator(docs, {}, 1), (std::vector<int32_t>{1, 5, 6, 1, 7, 1}));
  EXPECT_EQ(concat_with_separator(docs, {2, 0}, 1), (std::vector<int32_t>{1, 1, 5, 6}));
  EXPECT_TRUE(contains(error_of([&] { concat_with_separator(docs, {3}, 1); }), "document 3"));
}

TEST(DataLoader, LoaderStateJson) {
  nlohmann::json j = LoaderState{3, 17};
  EXPECT_EQ(j.dump(), R"({"epoch":3,"position":17})");
  EXPECT_EQ(j.get<LoaderState>(), (LoaderState{3, 17}));
  EXPECT_TRUE(contains(error_of([] { nlohmann::json::parse(R"({"epoch":1})").get<LoaderState>(); }), "position"));
  EXPECT_TRUE(contains(error_of([] { nlohmann::json::parse(R"({"epoch":-1,"position":0})").get<LoaderState>(); }),
                       "epoch"));
  EXPECT_TRUE(contains(error_of([] { nlohmann::json::parse("[1,2]").get<LoaderState>(); }), "JSON object"));
}
