// The paged KV cache (kiln/nn/kv_cache.h) and its ops: paged attention
// against attention written out with the plain ops, pages taken and given
// back, prefixes shared and evicted, and models that generate through it.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/backend/batch_invariant.h"
#include "kiln/backend/factory.h"
#include "kiln/nn/kv_cache.h"
#include "models/hf/hf_model.h"
#include "tests/hf_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

// Sequences of these lengths in a pool of pages of `page_size` positions,
// with their keys and values written through write_paged in one step.
struct Filled {
  std::shared_ptr<nn::KvPool> pool;
  std::vector<nn::KvCache> caches;
  std::vector<Tensor> keys, values;  // per sequence [length, Hkv, D]
};

Filled fill(const std::vector<int64_t>& lengths, int64_t kv_heads, int64_t D, DType dtype, uint64_t seed,
            int64_t page_size = 4) {
  Filled f;
  f.pool = std::make_shared<nn::KvPool>(nn::KvLayout{1, kv_heads, D, dtype, Device::cpu(), page_size}, 2);
  std::vector<nn::KvCache*> pointers;
  for (size_t s = 0; s < lengths.size(); ++s) f.caches.emplace_back(f.pool, 64);
  for (auto& c : f.caches) pointers.push_back(&c);
  const nn::PagedStep step = nn::plan_step(pointers, lengths, 0, Device::cpu());
  std::vector<Tensor> k_rows, v_rows;
  for (size_t s = 0; s < lengths.size(); ++s) {
    f.keys.push_back(to_dtype(testing::random_tensor({lengths[s], kv_heads, D}, seed + 2 * s, DType::f32), dtype));
    f.values.push_back(to_dtype(testing::random_tensor({lengths[s], kv_heads, D}, seed + 2 * s + 1, DType::f32), dtype));
  }
  NoGradGuard ng;
  nn::write_paged(step, 0, cat(f.keys, 0), cat(f.values, 0));
  for (size_t s = 0; s < lengths.size(); ++s) f.caches[s].commit(std::vector<int32_t>(size_t(lengths[s]), 7));
  return f;
}

// One query row over positions [lo, hi) of keys/values [n, Hkv, D], written with the plain ops.
Tensor reference_row(const Tensor& q, const Tensor& keys, const Tensor& values, int64_t lo, int64_t hi, double scale) {
  const int64_t H = q.size(0), Hkv = keys.size(1), D = q.size(1);
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / Hkv);
    Tensor k = reshape(slice(slice(keys, 0, lo, hi), 1, g, g + 1), {hi - lo, D});
    Tensor v = reshape(slice(slice(values, 0, lo, hi), 1, g, g + 1), {hi - lo, D});
    Tensor scores = matmul(reshape(slice(q, 0, h, h + 1), {1, D}), transpose(k, 0, 1)) * scale;
    heads.push_back(matmul(softmax(scores, -1), v));
  }
  return cat(heads, 0);  // [H, D]
}

TEST(PagedAttention, MatchesAttentionWrittenOutAndEachRowIsIndependentOfTheOthers) {
  NoGradGuard ng;
  const int64_t H = 6, Hkv = 2, D = 8;
  Filled f = fill({9, 3, 14}, Hkv, D, DType::f32, 11);
  // Rows: sequence 0 at its last position, sequence 2 at two positions with a window of 5, sequence 1 whole.
  const std::vector<int32_t> spans = {0, 0, 9, 2, 5, 10, 2, 9, 14, 1, 0, 3};
  std::vector<int32_t> tables;
  const size_t widest = f.caches[2].pages().size();
  for (auto& c : f.caches) {
    std::vector<int32_t> row = c.pages();
    row.resize(widest, 0);
    tables.insert(tables.end(), row.begin(), row.end());
  }
  const Tensor table = Tensor::from_vector(tables, {3, int64_t(widest)});
  const Tensor q = testing::random_tensor({4, H, D}, 5, DType::f32);
  const double scale = 1.0 / std::sqrt(double(D));
  const Tensor all = paged_attention(q, f.pool->keys(0), f.pool->values(0), table, Tensor::from_vector(spans, {4, 3}),
                                     scale);
  for (int64_t r = 0; r < 4; ++r) {
    const int32_t seq = spans[size_t(3 * r)], lo = spans[size_t(3 * r + 1)], hi = spans[size_t(3 * r + 2)];
    const Tensor want = reference_row(slice(reshape(q, {4 * H, D}), 0, r * H, (r + 1) * H), f.keys[size_t(seq)],
                                      f.values[size_t(seq)], lo, hi, scale);
    const Tensor got_row = reshape(slice(all, 0, r, r + 1), {H, D});
    EXPECT_LT(testing::max_abs_diff(got_row, want), 1e-6) << "row " << r;
    // Alone, the row gets the same bits.
    const Tensor alone = paged_attention(slice(q, 0, r, r + 1), f.pool->keys(0), f.pool->values(0), table,
                                         Tensor::from_vector(std::vector<int32_t>(spans.begin() + 3 * r,
                                                                                  spans.begin() + 3 * r + 3),
                                                             {1, 3}),
                                         scale);
    EXPECT_EQ(alone.to_vector<float>(), slice(all, 0, r, r + 1).to_vector<float>()) << "row " << r;
  }
}

// Pages of 16 (the models' size), whose whole stretches take the register
// kernels: every group size they tile (1 to 4 heads at a time, and 5) and
// head sizes on both sides of their 64- and 8-element blocks, against the
// plain ops; a span starting and ending inside pages takes the one-by-one
// path for its partial stretches.
TEST(PagedAttention, FullPagesMatchAttentionWrittenOutForEveryGroupAndHeadSize) {
  NoGradGuard ng;
  for (int64_t D : {8, 64, 72, 132})
    for (int64_t group : {1, 2, 3, 4, 5}) {
      const int64_t Hkv = 2, H = Hkv * group;
      Filled f = fill({45}, Hkv, D, DType::f32, 17 + D + group, 16);
      const Tensor table = Tensor::from_vector(f.caches[0].pages(), {1, int64_t(f.caches[0].pages().size())});
      const std::vector<int32_t> spans = {0, 0, 45, 0, 5, 37};
      const Tensor q = testing::random_tensor({2, H, D}, 19 + D, DType::f32);
      const double scale = 1.0 / std::sqrt(double(D));
      const Tensor all = paged_attention(q, f.pool->keys(0), f.pool->values(0), table,
                                         Tensor::from_vector(spans, {2, 3}), scale);
      for (int64_t r = 0; r < 2; ++r) {
        const Tensor want = reference_row(slice(reshape(q, {2 * H, D}), 0, r * H, (r + 1) * H), f.keys[0],
                                          f.values[0], spans[size_t(3 * r + 1)], spans[size_t(3 * r + 2)], scale);
        EXPECT_LT(testing::max_abs_diff(reshape(slice(all, 0, r, r + 1), {H, D}), want), 1e-5)
            << "D " << D << ", group " << group << ", row " << r;
      }
    }
}

// Decoding one stream has fewer key/value heads than two per thread, so
// each head group is split across the threads: the same bits at 1, 2, 3
// and 4 threads, and the plain ops' answer.
TEST(PagedAttention, OneRowSplitAcrossThreadsGivesTheSameBits) {
  NoGradGuard ng;
  const int saved = get_num_threads();
  for (int64_t group : {3, 4, 5}) {
    const int64_t Hkv = 3, H = Hkv * group, D = 128, n = 60;  // past the 32K work units that take threads
    Filled f = fill({n}, Hkv, D, DType::f32, 23 + group, 16);
    const Tensor table = Tensor::from_vector(f.caches[0].pages(), {1, int64_t(f.caches[0].pages().size())});
    const Tensor spans = Tensor::from_vector(std::vector<int32_t>{0, 0, int32_t(n)}, {1, 3});
    const Tensor q = testing::random_tensor({1, H, D}, 29 + group, DType::f32);
    const double scale = 1.0 / std::sqrt(double(D));
    std::vector<float> first;
    for (int threads : {1, 2, 3, 4}) {
      set_num_threads(threads);
      const Tensor got = paged_attention(q, f.pool->keys(0), f.pool->values(0), table, spans, scale);
      if (threads == 1) {
        first = got.to_vector<float>();
        EXPECT_LT(testing::max_abs_diff(reshape(got, {H, D}), reference_row(reshape(q, {H, D}), f.keys[0],
                                                                            f.values[0], 0, n, scale)),
                  1e-5)
            << "group " << group;
      } else {
        EXPECT_EQ(got.to_vector<float>(), first) << "group " << group << ", " << threads << " threads";
      }
    }
  }
  set_num_threads(saved);
}

TEST(PagedAttention, Bf16PagesStayNearTheF32Answer) {
  NoGradGuard ng;
  Filled wide = fill({21}, 1, 16, DType::f32, 3), low = fill({21}, 1, 16, DType::bf16, 3);
  const Tensor q = testing::random_tensor({1, 2, 16}, 8, DType::f32);
  const Tensor spans = Tensor::from_vector(std::vector<int32_t>{0, 0, 21}, {1, 3});
  auto run = [&](Filled& f, const Tensor& query) {
    const Tensor table = Tensor::from_vector(f.caches[0].pages(), {1, int64_t(f.caches[0].pages().size())});
    return paged_attention(query, f.pool->keys(0), f.pool->values(0), table, spans, 0.25);
  };
  const Tensor got = run(low, to_dtype(q, DType::bf16));
  EXPECT_EQ(got.dtype(), DType::bf16);
  EXPECT_LT(testing::max_abs_diff(to_dtype(got, DType::f32), run(wide, q)), 0.03);
}

TEST(PagedAttention, SpansAndPagesOutsideThePoolAreErrors) {
  NoGradGuard ng;
  Filled f = fill({5}, 1, 4, DType::f32, 1);
  const Tensor q = zeros({1, 1, 4});
  const Tensor table = Tensor::from_vector(f.caches[0].pages(), {1, 2});
  auto run = [&](std::vector<int32_t> span, const Tensor& t) {
    return paged_attention(q, f.pool->keys(0), f.pool->values(0), t, Tensor::from_vector(span, {1, 3}), 1.0);
  };
  EXPECT_NO_THROW(run({0, 0, 5}, table));
  EXPECT_THROW(run({1, 0, 5}, table), Error);   // no sequence 1
  EXPECT_THROW(run({0, 3, 2}, table), Error);   // backwards
  EXPECT_THROW(run({0, 0, 9}, table), Error);   // past the table's 2 pages of 4
  EXPECT_THROW(run({0, 0, 5}, Tensor::from_vector(std::vector<int32_t>{0, 99}, {1, 2})), Error);
  // scatter_rows_: whole rows (stride 1) or columns (a transposed page), never outside dst.
  Tensor dst = zeros({3, 2});
  auto offsets = [](std::vector<int64_t> o) { return Tensor::from_vector(o, {int64_t(o.size())}); };
  EXPECT_THROW(scatter_rows_(dst, offsets({5}), 1, ones({1, 2})), Error);
  EXPECT_THROW(scatter_rows_(dst, offsets({3}), 3, ones({1, 2})), Error);  // its second element at 6
  scatter_rows_(dst, offsets({4, 0}), 1, Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{3, 4, 0, 0, 1, 2}));
  scatter_rows_(dst, offsets({1}), 2, Tensor::from_vector<float>({7, 8, 9}, {1, 3}));
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{3, 7, 0, 8, 1, 9}));
}

TEST(KvCache, PagesAreTakenAsASequenceGrowsAndGivenBackWhenItEnds) {
  auto pool = std::make_shared<nn::KvPool>(nn::KvLayout{2, 1, 4, DType::f32, Device::cpu(), 4}, 1);
  {
    nn::KvCache a(pool, 20);
    a.reserve(6);  // page 0, then page 1 (the pool grew)
    for (int64_t pos = 0; pos < 6; ++pos) EXPECT_EQ(a.slot(pos), pos);
    a.commit(std::vector<int32_t>{1, 2, 3, 4, 5, 6});
    EXPECT_EQ(pool->pages_held(), 2);
    EXPECT_EQ(pool->pages(), 2);
    EXPECT_THROW(a.reserve(15), Error);  // 21 positions: over its capacity of 20
    nn::KvCache moved = std::move(a);
    EXPECT_EQ(moved.length(), 6);
    EXPECT_EQ(pool->pages_held(), 2);
  }
  EXPECT_EQ(pool->pages_held(), 0);  // gone with the cache
  EXPECT_EQ(pool->pages_cached(), 1);  // the full page, published, stays for its prefix
}

TEST(KvCache, GrowingThePoolKeepsWhatThePagesHold) {
  NoGradGuard ng;
  Filled f = fill({4}, 1, 4, DType::f32, 9);  // one page of the initial two
  const int64_t page = f.caches[0].pages()[0];
  const std::vector<float> before = slice(f.pool->keys(0), 0, page, page + 1).to_vector<float>();
  nn::KvCache big(f.pool, 64);
  big.reserve(40);  // 10 pages: the pool doubles until they fit
  EXPECT_GE(f.pool->pages(), 11);
  EXPECT_EQ(slice(f.pool->keys(0), 0, page, page + 1).to_vector<float>(), before);
}

TEST(KvCache, APromptTakesThePublishedPagesOfItsPrefixAndTheOldestCachedPageGoesFirst) {
  auto pool = std::make_shared<nn::KvPool>(nn::KvLayout{1, 1, 4, DType::f32, Device::cpu(), 4}, 4);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<int32_t> first_pages;
  {
    nn::KvCache a(pool, 64);
    a.reserve(10);
    a.commit(prompt);
    first_pages = a.pages();
    nn::KvCache b(pool, 64);
    EXPECT_EQ(b.adopt_prefix(prompt), 8);  // two whole pages; the rest is computed
    EXPECT_EQ(std::vector<int32_t>(b.pages()), std::vector<int32_t>(first_pages.begin(), first_pages.begin() + 2));
    EXPECT_EQ(pool->pages_held(), 3);
    nn::KvCache c(pool, 64);
    EXPECT_EQ(c.adopt_prefix(std::vector<int32_t>{1, 2, 3, 4, 0, 6, 7, 8, 9}), 4);  // differs in the second page
    nn::KvCache d(pool, 64);
    EXPECT_EQ(d.adopt_prefix(std::vector<int32_t>{1, 2, 3, 4}), 0);  // the last position is always computed
    EXPECT_EQ(pool->reused_positions(), 12);
  }
  EXPECT_EQ(pool->pages_held(), 0);
  EXPECT_EQ(pool->pages_cached(), 2);
  // Taking every page evicts the cached ones (the oldest released first), and the prefix is gone.
  nn::KvCache e(pool, 64);
  e.reserve(16);
  EXPECT_EQ(pool->pages_cached(), 0);
  EXPECT_EQ(pool->pages(), 4);
  e.clear();
  nn::KvCache f(pool, 64);
  EXPECT_EQ(f.adopt_prefix(prompt), 0);
}

// A chat's next turn resends the conversation: a prompt that starts as an
// earlier one did takes its pages and answers as the whole prompt computed
// afresh does; in batch-invariant mode, bit for bit.
TEST(KvCache, ASharedPrefixGivesTheLogitsOfTheWholePrompt) {
  for (const char* name : {"llama-gqa", "gpt2", "mistral"}) {
    auto lm = models::load_hf_causal_lm(hf_test::fixture(name), DType::f32);
    NoGradGuard ng;
    for (bool invariant : {false, true}) {
      set_batch_invariant(invariant);
      std::vector<int64_t> ids;  // new ids in each mode: nothing published in the other may be taken
      for (int64_t i = 0; i < 45; ++i) ids.push_back(5 + (i * 7 + (invariant ? 3 : 0)) % 90);
      auto run = [&](models::KvCache& cache) {
        return lm.model->forward_cached(Tensor::from_vector(ids, {1, 45}), cache);
      };
      models::KvCache first = lm.model->new_cache();
      const Tensor whole = run(first);
      const int64_t reused = first.pool().reused_positions();
      first.clear();  // its pages stay cached
      models::KvCache second = lm.model->new_cache();
      const Tensor shared = run(second);
      EXPECT_EQ(second.pool().reused_positions() - reused, 32) << name;
      if (invariant)
        EXPECT_EQ(shared.to_vector<float>(), whole.to_vector<float>()) << name;
      else
        EXPECT_LT(testing::max_abs_diff(shared, whole), 1e-4) << name;
    }
    set_batch_invariant(false);
  }
}

}  // namespace
}  // namespace kiln
