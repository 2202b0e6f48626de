// Tests for kiln/data: real Fashion-MNIST and fortunes files, error messages
// for missing and corrupt inputs, the tokenizer and its cache, deterministic
// splits and shuffles, and loader save/restore and prefetch shutdown.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <thread>

#include "kiln/data/fashion_mnist.h"
#include "kiln/data/fortunes.h"
#include "kiln/data/idx.h"
#include "kiln/data/loader.h"
#include "kiln/data/random.h"
#include "kiln/data/splits.h"
#include "kiln/data/tokenizer.h"

namespace fs = std::filesystem;
using namespace kiln;
using namespace kiln::data;

namespace {

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("kiln_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Runs f, expects a kiln::Error, and returns its message.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a kiln::Error";
  return "";
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  }
  gzclose(f);
}

// An IDX u8 file image: magic, big-endian dims, then `data`.
std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0, 0, 0x08, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(d >> s));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Writes a small valid Fashion-MNIST-shaped pair (n images) for `prefix`.
void write_fake_part(const TempDir& dir, const std::string& prefix, uint32_t n, std::vector<uint8_t> labels) {
  write_gz(dir / (prefix + "-images-idx3-ubyte.gz"), idx_bytes({n, 28, 28}, std::vector<uint8_t>(n * 784, 7)));
  write_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), idx_bytes({uint32_t(labels.size())}, labels));
}

const ImageDataset& real_train() {
  static const ImageDataset d = load_fashion_mnist(FashionMnistPart::train, kFashionMnistDefaultDir);
  return d;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

// ---- Fashion-MNIST ------------------------------------------------------------

TEST(DataFashionMnist, ReadsRealFiles) {
  const ImageDataset& train = real_train();
  ASSERT_EQ(train.images.shape(), (Shape{60000, 28, 28}));
  ASSERT_EQ(train.labels.shape(), (Shape{60000}));
  EXPECT_EQ(train.images.dtype(), DType::u8);
  EXPECT_EQ(train.labels.dtype(), DType::i64);
  // Reference values read from the files with Python's gzip module.
  const int64_t* l = train.labels.data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(l, l + 6), (std::vector<int64_t>{9, 0, 0, 3, 0, 2}));
  EXPECT_STREQ(fashion_mnist_class_names()[size_t(l[0])], "Ankle boot");
  const uint8_t* px = train.images.data<uint8_t>();
  EXPECT_EQ(std::accumulate(px, px + 784, int64_t(0)), 76247);
  auto [lo, hi] = std::minmax_element(px, px + train.images.numel());
  EXPECT_EQ(*lo, 0);
  EXPECT_EQ(*hi, 255);
  std::vector<int64_t> per_class(10, 0);
  for (int64_t i = 0; i < 60000; ++i) per_class[size_t(l[i])]++;
  for (int64_t c : per_class) EXPECT_EQ(c, 6000);  // Fashion-MNIST is balanced

  ImageDataset test = load_fashion_mnist(FashionMnistPart::test, kFashionMnistDefaultDir);
  ASSERT_EQ(test.size(), 10000);
  const int64_t* tl = test.labels.data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(tl, tl + 5), (std::vector<int64_t>{9, 2, 1, 1, 6}));
  const uint8_t* tp = test.images.data<uint8_t>();
  EXPECT_EQ(std::accumulate(tp, tp + 784, int64_t(0)), 33456);
  EXPECT_STREQ(fashion_mnist_class_names()[0], "T-shirt/top");
  EXPECT_STREQ(fashion_mnist_class_names()[1], "Trouser");
}

TEST(DataFashionMnist, MissingDirectoryNamesPackage) {
  std::string msg = error_of([] { load_fashion_mnist(FashionMnistPart::train, "/nonexistent/kiln-fmnist"); });
  EXPECT_TRUE(contains(msg, "/nonexistent/kiln-fmnist")) << msg;
  EXPECT_TRUE(contains(msg, "sudo apt-get install dataset-fashion-mnist")) << msg;
}

TEST(DataFashionMnist, MissingFileNamesFileAndEnvOverrideIsUsed) {
  TempDir dir;
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({1}, {3}));
  const char* old = std::getenv("KILN_FASHION_MNIST_DIR");
  std::string saved = old ? old : "";
  ::setenv("KILN_FASHION_MNIST_DIR", dir.path.c_str(), 1);
  EXPECT_EQ(fashion_mnist_dir(), dir.path.string());
  EXPECT_EQ(fashion_mnist_dir("/explicit"), "/explicit");  // the argument wins
  std::string msg = error_of([] { load_fashion_mnist(FashionMnistPart::train); });
  if (old) ::setenv("KILN_FASHION_MNIST_DIR", saved.c_str(), 1); else ::unsetenv("KILN_FASHION_MNIST_DIR");
  EXPECT_TRUE(contains(msg, dir / "train-images-idx3-ubyte.gz")) << msg;
  EXPECT_TRUE(contains(msg, "sudo apt-get install dataset-fashion-mnist")) << msg;
}

TEST(DataFashionMnist, SmallValidFilesLoad) {
  TempDir dir;
  write_fake_part(dir, "t10k", 3, {0, 9, 4});
  ImageDataset d = load_fashion_mnist(FashionMnistPart::test, dir.path.string());
  ASSERT_EQ(d.size(), 3);
  const int64_t* l = d.labels.data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(l, l + 3), (std::vector<int64_t>{0, 9, 4}));
  EXPECT_EQ(d.images.data<uint8_t>()[3 * 784 - 1], 7);
}

TEST(DataFashionMnist, CorruptFilesNameFileAndProblem) {
  TempDir dir;
  const std::string images = dir / "train-images-idx3-ubyte.gz", labels = dir / "train-labels-idx1-ubyte.gz";
  auto load = [&] { load_fashion_mnist(FashionMnistPart::train, dir.path.string()); };
  auto expect_error = [&](const std::string& file, const std::string& what) {
    std::string msg = error_of(load);
    EXPECT_TRUE(contains(msg, file)) << msg;
    EXPECT_TRUE(contains(msg, what)) << msg;
  };
  write_fake_part(dir, "train", 4, {1, 2, 3, 4});

  write_gz(images, {0x12, 0x34, 0x08, 3, 0, 0, 0, 1});  // bad magic
  expect_error(images, "wrong magic");

  write_gz(images, idx_bytes({4, 28, 28}, std::vector<uint8_t>(784 * 2, 1)));  // header says 4, holds 2
  expect_error(images, "short data");

  write_gz(images, idx_bytes({4, 28, 28}, std::vector<uint8_t>(784 * 4 + 10, 1)));
  expect_error(images, "more data than its header");

  write_gz(images, idx_bytes({4, 14, 56}, std::vector<uint8_t>(784 * 4, 1)));
  expect_error(images, "[N, 28, 28]");

  write_gz(images, idx_bytes({4, 28, 28}, std::vector<uint8_t>(784 * 4, 1)));
  write_gz(labels, idx_bytes({3}, {1, 2, 3}));
  expect_error(labels, "holds 3 labels");

  write_gz(labels, idx_bytes({4}, {1, 2, 10, 3}));
  expect_error(labels, "label 10");

  // A gzip stream cut short: keep the first half of a valid compressed file.
  write_gz(labels, idx_bytes({4}, {1, 2, 3, 4}));
  std::vector<uint8_t> pixels(784 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 7919 % 251);  // poorly compressible
  write_gz(images, idx_bytes({4, 28, 28}, pixels));
  fs::resize_file(images, fs::file_size(images) / 2);
  expect_error(images, "truncated");

  // Not gzip at all and not IDX either (zlib passes plain files through).
  { std::ofstream(images, std::ios::binary) << "this is not a dataset"; }
  expect_error(images, "wrong magic");

  // Damaged compressed bytes in the middle of the stream.
  write_gz(images, idx_bytes({4, 28, 28}, pixels));
  {
    std::fstream f(images, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    std::string junk(200, '\xAB');
    f.write(junk.data(), std::streamsize(junk.size()));
  }
  std::string msg = error_of(load);
  EXPECT_TRUE(contains(msg, images)) << msg;
}

// ---- fortunes ---------------------------------------------------------------------

TEST(DataFortunes, SplitsFileOnPercentLines) {
  EXPECT_EQ(split_fortune_file("a\n  b\n%\nc\n%\n\n%\nd"), (std::vector<std::string>{"a\n  b", "c", "d"}));
  EXPECT_EQ(split_fortune_file(""), std::vector<std::string>{});
  EXPECT_EQ(split_fortune_file("x %\n%\n"), std::vector<std::string>{"x %"});
}

TEST(DataFortunes, DirectoryRules) {
  TempDir dir;
  { std::ofstream(dir / "b") << "bee one\n%\nbee two\n"; }
  { std::ofstream(dir / "a") << "aye\n%\n"; }
  { std::ofstream(dir / "a.dat") << "\x01\x02 binary index"; }
  fs::create_symlink(dir / "a", dir / "a.u8");
  fs::create_directories(dir / "off");
  { std::ofstream(dir / "off/rude") << "offensive\n%\n"; }
  EXPECT_EQ(load_fortunes(dir.path.string()), (std::vector<std::string>{"aye", "bee one", "bee two"}));

  { std::ofstream(dir / "c") << "caf\xE9\n%\n"; }  // Latin-1, not UTF-8
  std::string msg = error_of([&] { load_fortunes(dir.path.string()); });
  EXPECT_TRUE(contains(msg, dir / "c")) << msg;
  EXPECT_TRUE(contains(msg, "UTF-8")) << msg;
}

TEST(DataFortunes, RealCorpus) {
  std::vector<std::string> f = load_fortunes(kFortunesDefaultDir);
  EXPECT_GT(f.size(), 10000u);
  // The first fortune is the start of the alphabetically first file, "art",
  // read here independently.
  std::ifstream art(std::string(kFortunesDefaultDir) + "/art");
  std::string line, first;
  while (std::getline(art, line) && line != "%") first += (first.empty() ? "" : "\n") + line;
  EXPECT_EQ(f[0], first);
  std::set<std::string> distinct(f.begin(), f.end());
  EXPECT_GT(distinct.size(), f.size() * 9 / 10);  // the .u8 symlinks were not read twice
  for (const std::string& s : f) ASSERT_FALSE(contains("\n" + s + "\n", "\n%\n")) << s;
}

TEST(DataFortunes, MissingDirectoryNamesPackage) {
  std::string msg = error_of([] { load_fortunes("/nonexistent/fortunes-dir"); });
  EXPECT_TRUE(contains(msg, "/nonexistent/fortunes-dir")) << msg;
  EXPECT_TRUE(contains(msg, "sudo apt-get install fortunes")) << msg;
}

// ---- tokenizer --------------------------------------------------------------------

namespace {

// A small slice of the corpus and a small vocabulary keep training well under
// a second; the model is cached in a temp dir shared by the tokenizer tests.
class DataTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    corpus_ = new std::vector<std::string>(load_fortunes(kFortunesDefaultDir));
    cache_ = new TempDir();
    train_docs_ = new std::vector<std::string>(corpus_->begin(), corpus_->begin() + 3000);
  }
  static void TearDownTestSuite() {
    delete corpus_;
    delete cache_;
    delete train_docs_;
  }
  static TokenizerOptions options(int vocab = 512) {
    TokenizerOptions o;
    o.vocab_size = vocab;
    o.cache_dir = cache_->path.string();
    o.corpus_name = "test";
    o.num_threads = 2;
    return o;
  }
  static std::vector<std::string>* corpus_;
  static std::vector<std::string>* train_docs_;
  static TempDir* cache_;
};
std::vector<std::string>* DataTokenizer::corpus_ = nullptr;
std::vector<std::string>* DataTokenizer::train_docs_ = nullptr;
TempDir* DataTokenizer::cache_ = nullptr;

}  // namespace

TEST_F(DataTokenizer, RoundTripAndSpecialIds) {
  Tokenizer tok = Tokenizer::train_or_load(*train_docs_, options());
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.end_of_text_id(), 1);
  EXPECT_EQ(tok.piece(1), kEndOfTextPiece);
  // Fortunes from inside and outside the training slice, plus text the corpus
  // never shows: tabs, runs of spaces, leading newlines, emoji, CJK.
  std::vector<std::string> texts = {(*corpus_)[0], (*corpus_)[17], (*corpus_)[5000], corpus_->back(),
                                    "\tindented\n   three spaces  and two\n\n",
                                    "\n leading newline", "emoji \xF0\x9F\x98\x80 and \xE6\xBC\xA2\xE5\xAD\x97",
                                    "<|endoftext|> spelled out", ""};
  for (const std::string& s : texts) {
    std::vector<int32_t> ids = tok.encode(s);
    for (int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, tok.vocab_size());
      ASSERT_NE(id, tok.end_of_text_id()) << "text must never encode to the separator: " << s;
      ASSERT_NE(id, 0) << "byte fallback should leave nothing unknown: " << s;
    }
    EXPECT_EQ(tok.decode(ids), s);
  }
  // BPE compresses: English text takes clearly fewer tokens than bytes.
  const std::string& f = (*corpus_)[5000];
  EXPECT_LT(tok.encode(f).size(), f.size() * 7 / 10);
  // The separator decodes to nothing; ids outside the vocabulary are errors.
  std::vector<int32_t> with_eot = tok.encode("ab");
  with_eot.insert(with_eot.begin() + 1, tok.end_of_text_id());
  EXPECT_EQ(tok.decode(with_eot), "ab");
  EXPECT_TRUE(contains(error_of([&] { tok.decode({5, 512}); }), "outside the vocabulary"));
  EXPECT_TRUE(contains(error_of([&] { tok.decode({-1}); }), "outside the vocabulary"));
}

TEST_F(DataTokenizer, CachedModelIsNotRetrained) {
  TokenizerOptions o = options(520);
  Tokenizer first = Tokenizer::train_or_load(*train_docs_, o);
  EXPECT_TRUE(first.trained());
  ASSERT_TRUE(fs::exists(first.model_path()));
  EXPECT_EQ(first.model_path(), Tokenizer::cache_path(*train_docs_, o));
  EXPECT_TRUE(contains(first.model_path(), "test-bpe520-"));
  auto mtime = fs::last_write_time(first.model_path());

  Tokenizer second = Tokenizer::train_or_load(*train_docs_, o);
  EXPECT_FALSE(second.trained());
  EXPECT_EQ(fs::last_write_time(second.model_path()), mtime);
  EXPECT_EQ(second.encode((*corpus_)[42]), first.encode((*corpus_)[42]));

  // A different corpus or vocabulary is a different cache entry.
  std::vector<std::string> other(train_docs_->begin(), train_docs_->end() - 1);
  EXPECT_NE(Tokenizer::cache_path(other, o), first.model_path());
  EXPECT_NE(Tokenizer::cache_path(*train_docs_, options(521)), first.model_path());
}

TEST_F(DataTokenizer, CorruptCacheIsRetrained) {
  TokenizerOptions o = options(540);
  Tokenizer good = Tokenizer::train_or_load(*train_docs_, o);
  const std::string path = good.model_path();
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage, not a model"; }
  std::string msg = error_of([&] { Tokenizer::load(path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  Tokenizer again = Tokenizer::train_or_load(*train_docs_, o);
  EXPECT_TRUE(again.trained());
  EXPECT_EQ(again.serialized_model(), good.serialized_model());
  EXPECT_EQ(Tokenizer::load(path).serialized_model(), good.serialized_model());  // the file was rewritten
  EXPECT_TRUE(contains(error_of([&] { Tokenizer::load(path + ".missing"); }), "not found"));
}

TEST_F(DataTokenizer, TrainingIsDeterministicAcrossThreadCounts) {
  TempDir other_cache;
  TokenizerOptions a = options(560), b = options(560);
  b.cache_dir = other_cache.path.string();
  b.num_threads = 1;
  Tokenizer ta = Tokenizer::train_or_load(*train_docs_, a), tb = Tokenizer::train_or_load(*train_docs_, b);
  ASSERT_EQ(ta.vocab_size(), tb.vocab_size());
  for (int i = 0; i < ta.vocab_size(); ++i) ASSERT_EQ(ta.piece(i), tb.piece(i)) << "id " << i;
  EXPECT_EQ(ta.encode((*corpus_)[9000]), tb.encode((*corpus_)[9000]));
}

TEST_F(DataTokenizer, TooSmallVocabularyIsAClearError) {
  std::string msg = error_of([&] { Tokenizer::train_or_load(*train_docs_, options(100)); });
  EXPECT_TRUE(contains(msg, "vocab_size 100")) << msg;
}

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
