// Batch-invariant mode (kiln/backend/batch_invariant.h): the fixed-order
// GEMM against its plain C++ statement, and models whose every answer has
// the same bits alone and in any batch: classifiers over padded texts,
// language models' batched prompts and decoding steps, quantized weights.
#include <gtest/gtest.h>

#include "apps/recipes/hf_inference.h"
#include "kiln/backend/batch_invariant.h"
#include "kiln/backend/factory.h"
#include "kiln/cpu/invariant_gemm.h"
#include "models/gpt/text_classifier.h"
#include "models/hf/hf_model.h"
#include "kiln/nn/layers.h"
#include "tests/hf_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

struct InvariantMode {
  InvariantMode() { set_batch_invariant(true); }
  ~InvariantMode() { set_batch_invariant(false); }
};

std::vector<float> random_floats(size_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(g.uniform() * 2 - 1);
  return v;
}

// Every element is invariant_dot of its row and column, bit for bit, for
// each transpose and for tails of k, m and n; and a row's bits do not
// change with the rows around it or with the thread count.
TEST(InvariantGemm, EveryElementIsTheFixedOrderDotWhateverTheShapeAndThreads) {
  for (int64_t k : {1, 7, 8, 13, 64, 100})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t m = 9, n = 50;
        const auto a = random_floats(size_t(m * k), 1 + k), b = random_floats(size_t(k * n), 2 + k);
        std::vector<float> c(size_t(m * n), 0.0f);
        cpu::invariant_gemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            std::vector<float> row(static_cast<size_t>(k)), col(static_cast<size_t>(k));
            for (int64_t p = 0; p < k; ++p) {
              row[size_t(p)] = ta ? a[size_t(p * m + i)] : a[size_t(i * k + p)];
              col[size_t(p)] = tb ? b[size_t(j * k + p)] : b[size_t(p * n + j)];
            }
            ASSERT_EQ(c[size_t(i * n + j)], cpu::invariant_dot(row.data(), col.data(), k))
                << "k " << k << " ta " << ta << " tb " << tb << " at " << i << "," << j;
          }
      }
  // Row 3 of a 37-row product, alone, and at 1 and 2 threads: the same bits.
  const int64_t m = 37, n = 200, k = 96;
  const auto a = random_floats(size_t(m * k), 5), w = random_floats(size_t(n * k), 6);
  std::vector<float> all(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
  cpu::invariant_gemm(false, true, m, n, k, 1.0f, a.data(), k, w.data(), k, 0.0f, all.data(), n);
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    cpu::invariant_gemm(false, true, 1, n, k, 1.0f, a.data() + 3 * k, k, w.data(), k, 0.0f, one.data(), n);
    EXPECT_EQ(one, std::vector<float>(all.begin() + 3 * n, all.begin() + 4 * n)) << threads << " threads";
  }
  set_num_threads(saved);
}

TEST(InvariantGemm, MatmulInTheModeAgreesWithTheUsualProduct) {
  const Tensor a = testing::random_tensor({2, 33, 70}, 3, DType::f32);
  const Tensor b = testing::random_tensor({2, 70, 21}, 4, DType::f32);
  const Tensor usual = matmul(a, b);
  InvariantMode on;
  EXPECT_LT(testing::max_abs_diff(matmul(a, b), usual), 1e-5);
  EXPECT_LT(testing::max_abs_diff(matmul(to_dtype(a, DType::bf16), to_dtype(b, DType::bf16)),
                                  matmul(to_dtype(to_dtype(a, DType::bf16), DType::f32),
                                         to_dtype(to_dtype(b, DType::bf16), DType::f32))),
            0.05);
}

// Texts of many lengths, classified in one padded batch and each alone.
TEST(BatchInvariant, ClassifiersAnswerEachTextAloneAndInABatchWithTheSameBits) {
  InvariantMode on;
  std::vector<std::string> texts;
  for (int i = 0; i < 24; ++i) {
    std::string t = "fortune";
    for (int w = 0; w < (i * 5) % 17; ++w) t += w % 2 ? " cookie" : " jar";
    texts.push_back(t);
  }
  for (const char* name : {"bert", "distilbert"}) {
    auto served = recipes::load_hf_for_inference(hf_test::fixture(name), Device::cpu());
    const auto batch = served.model->classify_tokens(served.model->encode_texts(texts)).to_vector<float>();
    const size_t labels = batch.size() / texts.size();
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto alone = served.model->classify_tokens(served.model->encode_texts({texts[i]})).to_vector<float>();
      EXPECT_EQ(alone, std::vector<float>(batch.begin() + long(i * labels), batch.begin() + long((i + 1) * labels)))
          << name << ": " << texts[i];
    }
  }
  // Kiln's own text classifier: causal blocks, mean-pooled, padded with its pad id.
  models::GptConfig c;
  c.vocab_size = 40, c.block_size = 32, c.n_layer = 2, c.n_head = 2, c.n_embd = 24;
  Generator g(4);
  models::TextClassifier cls(c, 3, g, std::make_shared<Generator>(1));
  cls.eval();
  NoGradGuard ng;
  const int64_t B = 12, T = 32;
  std::vector<int64_t> ids(size_t(B * T), cls.pad_id());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < 3 + (b * 7) % 29; ++t) ids[size_t(b * T + t)] = (b + 3 * t) % 39;
  const auto batch = cls(Tensor::from_vector(ids, {B, T})).to_vector<float>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = 3 + (b * 7) % 29;
    std::vector<int64_t> own(ids.begin() + b * T, ids.begin() + b * T + n);
    EXPECT_EQ(cls(Tensor::from_vector(own, {1, n})).to_vector<float>(),
              std::vector<float>(batch.begin() + b * 3, batch.begin() + (b + 1) * 3))
        << "text " << b;
  }
}

// Sequences decoded together give each one's logits bit for bit as it gets
// alone, prompt and every step, in f32, bf16 and with int8 weights.
TEST(BatchInvariant, LanguageModelsDecodeEachSequenceAloneAndBatchedWithTheSameBits) {
  InvariantMode on;
  struct Case {
    const char* fixture;
    DType dtype;
    bool int8;
  };
  for (const Case& k : {Case{"llama-gqa", DType::f32, false}, Case{"gpt2", DType::f32, false},
                        Case{"llama-bf16", DType::bf16, false}, Case{"mistral", DType::f32, true},
                        Case{"gemma2", DType::f32, false}, Case{"mixtral", DType::f32, true}}) {
    auto lm = models::load_hf_causal_lm(hf_test::fixture(k.fixture), k.dtype);
    if (k.int8) nn::quantize_weights(*lm.model, QuantFormat::int8);
    NoGradGuard ng;
    const std::vector<std::vector<int32_t>> prompts = {
        {5, 9, 13}, {7, 1, 4, 4, 8, 20, 31, 2, 9, 6, 11, 3, 50, 17, 2, 8, 40, 3}, {12}, {3, 3, 3, 3, 3, 3, 3, 9}};
    auto logits_of = [&](const Tensor& t) { return to_dtype(t, DType::f32).to_vector<float>(); };
    std::vector<models::KvCache> together, alone;
    std::vector<models::KvCache*> pointers;
    for (size_t s = 0; s < prompts.size(); ++s) {
      together.push_back(lm.model->new_cache());
      alone.push_back(lm.model->new_cache());
    }
    for (auto& c : together) pointers.push_back(&c);
    // Prompts: one at a time each (the server's path for these models), then decoded together.
    for (size_t s = 0; s < prompts.size(); ++s) {
      std::vector<int64_t> ids(prompts[s].begin(), prompts[s].end());
      const Tensor t = Tensor::from_vector(ids, {1, int64_t(ids.size())});
      EXPECT_EQ(logits_of(lm.model->forward_cached(t, together[s])), logits_of(lm.model->forward_cached(t, alone[s])));
    }
    for (int step = 0; step < 3; ++step) {
      std::vector<int32_t> next;
      for (size_t s = 0; s < prompts.size(); ++s) next.push_back(int32_t(10 + 3 * s + step));
      const auto batched = logits_of(lm.model->forward_decode(next, pointers));
      const size_t V = batched.size() / next.size();
      for (size_t s = 0; s < prompts.size(); ++s) {
        const auto one = logits_of(lm.model->forward_decode({next[s]}, {&alone[s]}));
        EXPECT_EQ(one, std::vector<float>(batched.begin() + long(s * V), batched.begin() + long((s + 1) * V)))
            << k.fixture << " sequence " << s << " step " << step;
      }
    }
  }
}

// Prompts batched padded to the longest: each prompt's logits are its own
// alone, bit for bit (Kiln's GPT and the Llama family, windowed too; Gemma 2's
// capped sliding layers between global ones; a mixture of experts).
TEST(BatchInvariant, BatchedPromptsGiveEachPromptsOwnBits) {
  InvariantMode on;
  for (const char* name : {"gpt2", "llama-gqa", "mistral", "gemma2", "mixtral"}) {
    auto lm = models::load_hf_causal_lm(hf_test::fixture(name), DType::f32);
    NoGradGuard ng;
    const std::vector<std::vector<int64_t>> prompts = {
        {5, 9, 13}, {7, 1, 4, 4, 8, 20, 31, 2, 9, 6, 11, 3, 3, 3, 3, 3, 3, 3, 3, 3, 8, 9, 10, 11, 12}, {12}};
    std::vector<models::KvCache> caches;
    std::vector<models::KvCache*> pointers;
    for (size_t s = 0; s < prompts.size(); ++s) caches.push_back(lm.model->new_cache());
    for (auto& c : caches) pointers.push_back(&c);
    const auto batched = lm.model->forward_prompts(prompts, pointers).to_vector<float>();
    const size_t V = batched.size() / prompts.size();
    caches.clear();  // (their published pages would serve the prompts alone)
    for (size_t s = 0; s < prompts.size(); ++s) {
      auto fresh = models::load_hf_causal_lm(hf_test::fixture(name), DType::f32);
      models::KvCache own = fresh.model->new_cache();
      const auto one = fresh.model->forward_prompts({prompts[s]}, {&own}).to_vector<float>();
      EXPECT_EQ(one, std::vector<float>(batched.begin() + long(s * V), batched.begin() + long((s + 1) * V)))
          << name << " prompt " << s;
    }
  }
}

}  // namespace
}  // namespace kiln
