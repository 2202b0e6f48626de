// A paged KV cache, as vLLM's PagedAttention keeps one: the keys and values
// of every sequence a model is generating live in fixed-size pages of one
// pool per model, and each sequence holds a table of its pages. A sequence
// takes pages as it grows and gives them back when it ends, so memory
// follows the positions in use, not a whole context per sequence; one
// attention op (paged_attention, backend.h) reads a whole batch through
// the tables.
//
// Prefix sharing (vLLM's automatic prefix caching): a page that a sequence
// has filled is published under its contents (the page before it and its
// tokens). A new sequence whose prompt starts with the same pages takes
// them by reference instead of computing them again: a chat's next turn
// resends the whole conversation, and every request with one system prompt
// starts alike. A published page nobody holds stays cached until a new page
// is needed and none is unused; then the one released longest ago goes.
// Pages are never written once full, so sharing needs no copy-on-write.
//
// One thread at a time works on a pool's caches (the serving scheduler's,
// or the caller's); the counters may be read from any thread.
#pragma once
#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kiln/autograd/ops.h"

namespace kiln::nn {

struct KvLayout {
  int64_t layers = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  int64_t page_size = 16;  // positions a page (vLLM's default block size)
  size_t page_bytes() const { return size_t(2 * layers * page_size * kv_heads * head_dim) * dtype_size(dtype); }
  int64_t pages_for(int64_t positions) const { return (positions + page_size - 1) / page_size; }
};

class KvPool {
 public:
  explicit KvPool(const KvLayout& layout, int64_t initial_pages = 64);
  const KvLayout& layout() const { return layout_; }
  // Layer l's pages: keys [pages, kv_heads, head_dim, page_size] (a page's
  // keys transposed, as paged_attention reads them) and values [pages,
  // kv_heads, page_size, head_dim]. A pool grows (by
  // doubling) when a page is needed and none is free, so take these after
  // the pages a step needs are reserved (KvCache::reserve).
  Tensor& keys(int64_t layer) { return keys_[size_t(layer)]; }
  Tensor& values(int64_t layer) { return values_[size_t(layer)]; }

  int64_t pages() const { return pages_.load(); }
  int64_t pages_held() const { return held_.load(); }          // by some sequence
  int64_t pages_cached() const { return cached_count_.load(); }  // held by none, kept for their prefix
  int64_t reused_positions() const { return reused_.load(); }    // positions taken from the prefix cache so far

 private:
  friend class KvCache;
  // The key a filled page is published under: the page before it (by its
  // publication id, which is never reused) and its tokens.
  using PrefixKey = std::pair<uint64_t, std::vector<int32_t>>;
  int32_t take_page();
  void hold(int32_t page);
  void release(int32_t page);
  // Publishes a full page; returns the id its successors key on (an equal
  // page published before keeps the key, and its id is returned).
  uint64_t publish(int32_t page, const PrefixKey& key);
  // The page published under `key`, held for the caller, or -1; its id in *id.
  int32_t find(const PrefixKey& key, uint64_t* id);
  void grow_to(int64_t pages);

  KvLayout layout_;
  std::vector<Tensor> keys_, values_;
  std::mutex mutex_;
  std::vector<int32_t> holders_;             // per page
  std::vector<int32_t> unused_;              // free pages that hold no published prefix
  std::list<int32_t> cached_;                // free published pages, least recently released first
  std::vector<std::list<int32_t>::iterator> cached_at_;
  std::vector<const PrefixKey*> published_;  // per page: its key in index_, or null
  std::map<PrefixKey, std::pair<int32_t, uint64_t>> index_;  // key -> page, id
  uint64_t next_id_ = 1;
  std::atomic<int64_t> pages_{0}, held_{0}, cached_count_{0}, reused_{0};
};

// One sequence's cache: its page table and the tokens at its positions.
class KvCache {
 public:
  KvCache() = default;
  KvCache(std::shared_ptr<KvPool> pool, int64_t capacity);
  ~KvCache() { clear(); }
  KvCache(KvCache&& other) noexcept { *this = std::move(other); }
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t length() const { return length_; }      // positions cached
  int64_t capacity() const { return capacity_; }  // positions it may hold (the model's context)
  KvPool& pool() const { return *pool_; }
  const std::vector<int32_t>& pages() const { return pages_; }

  // On an empty cache: takes the longest published prefix of `ids` in whole
  // pages, leaving at least the last id to compute (its logits are wanted).
  // Returns the positions taken; the caller runs the rest from there.
  int64_t adopt_prefix(std::span<const int32_t> ids);
  // The positions the last adopt_prefix took (0 after clear): what a prompt did not compute.
  int64_t adopted() const { return adopted_; }
  // Pages for positions [length, length + n), taken from the pool as needed
  // (and room for their tokens: a step that stays in its page allocates nothing).
  void reserve(int64_t n);
  // Where reserved position `pos` lives in the pool: page * page_size + offset.
  int32_t slot(int64_t pos) const;
  // The reserved positions [length, length + tokens.size()) now hold the
  // keys and values of `tokens`: the length grows and filled pages are published.
  void commit(std::span<const int32_t> tokens);
  // Gives every page back: an empty cache.
  void clear();
  // The tokens at positions [0, length).
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Off: this cache neither adopts published prefixes nor publishes its own
  // (a model whose keys at a position depend on more than the tokens before
  // it, as longrope's do on the sequence's length, must not share them).
  void share_prefixes(bool on) { shares_prefixes_ = on; }

 private:
  std::shared_ptr<KvPool> pool_;
  int64_t capacity_ = 0, length_ = 0;
  std::vector<int32_t> pages_;
  std::vector<int32_t> tokens_;  // at positions [0, length)
  uint64_t last_published_id_ = 0;  // the id of the last page published (0: none)
  int64_t published_pages_ = 0;
  int64_t adopted_ = 0;
  bool shares_prefixes_ = true;
};

// What one forward pass over some sequences' caches needs, made once for
// every layer: the new positions' slots and the tables and spans
// paged_attention reads.
struct PagedStep {
  KvPool* pool = nullptr;  // the caches' own
  // i64 [rows * kv_heads]: where each new position's key and value of each
  // head start in the layer's pages (element offsets; a key's elements are
  // page_size apart, a value's adjacent).
  Tensor key_offsets, value_offsets;
  Tensor tables;  // i32 [sequences, pages]
  Tensor spans;   // i32 [rows, 3]
  Tensor local_spans;  // the same rows over plan_step's local_window (defined when one was given)
};
// Sequence s appends new_positions[s] positions to *caches[s]; the query
// rows are sequence 0's new positions, then sequence 1's, and so on, each
// seeing its own position and those before it (the last `window` when
// window > 0). Reserves the pages; the caller commits the tokens after the
// pass. All caches must share one pool. local_window > 0 adds local_spans,
// for models whose sliding-window layers sit between global ones (Gemma).
PagedStep plan_step(std::span<KvCache* const> caches, std::span<const int64_t> new_positions, int64_t window,
                    Device device, int64_t local_window = 0);
// plan_step's new_positions for a decoding step: 1 for each of `caches`
// caches (kept per thread, so a step allocates nothing; valid until the next call).
std::span<const int64_t> one_position_each(size_t caches);
// The real rows of a padded batch [B, T, ...] seen as [B * T, ...]: row
// b * T + t for t < lengths[b], in plan_step's order.
class RealRows {
 public:
  RealRows() = default;  // no padding: every row real (a decoding step's)
  RealRows(const std::vector<int64_t>& lengths, int64_t T, Device device);
  bool padded() const { return int64_t(rows_.size()) < all_; }
  // x [B * T, ...] -> its real rows [rows, ...] (x itself when none is padding).
  Tensor take(const Tensor& x) const;
  // [rows, ...] -> [B * T, ...], zeros at the padding.
  Tensor put(const Tensor& x) const;

 private:
  int64_t all_ = 0;
  std::vector<int64_t> rows_;
  Tensor index_;  // i64 [rows] on the device
};

// Writes one layer's new keys and values (rows in plan_step's order, [rows,
// kv heads, head dim] of any layout) into the pool.
void write_paged(const PagedStep& step, int64_t layer, const Tensor& k, const Tensor& v);
// Attention of the rows' queries q [rows, heads, head dim] over the pages
// (after write_paged): [rows, heads, head dim] in the pool's dtype. `local`:
// over step.local_spans; softcap > 0 caps the scores (paged_attention).
Tensor read_paged(const PagedStep& step, int64_t layer, const Tensor& q, double scale, bool local = false,
                  double softcap = 0);

}  // namespace kiln::nn
