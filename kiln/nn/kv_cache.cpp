#include "kiln/nn/kv_cache.h"

#include "kiln/backend/factory.h"

#include <algorithm>
#include <utility>

namespace kiln::nn {

KvPool::KvPool(const KvLayout& layout, int64_t initial_pages) : layout_(layout) {
  KILN_CHECK(layout.layers > 0 && layout.kv_heads > 0 && layout.head_dim > 0 && layout.page_size > 0,
             "kv cache: a pool needs layers, heads, a head size and a page size, got ", layout.layers, ", ",
             layout.kv_heads, ", ", layout.head_dim, ", ", layout.page_size);
  keys_.resize(size_t(layout.layers));
  values_.resize(size_t(layout.layers));
  grow_to(std::max<int64_t>(initial_pages, 1));
}

void KvPool::grow_to(int64_t total) {
  const int64_t before = pages_.load();
  const Shape key_page{layout_.kv_heads, layout_.head_dim, layout_.page_size};
  const Shape value_page{layout_.kv_heads, layout_.page_size, layout_.head_dim};
  for (auto [side, page] : {std::pair{&keys_, &key_page}, std::pair{&values_, &value_page}})
    for (Tensor& pages : *side) {
      NoGradGuard ng;
      Shape shape{total};
      shape.insert(shape.end(), page->begin(), page->end());
      Tensor bigger = Tensor::empty(shape, layout_.dtype, layout_.device);
      if (before > 0) {
        Tensor old_part = slice(bigger, 0, 0, before);
        copy_into(pages, old_part);
      }
      pages = bigger;
    }
  holders_.resize(size_t(total), 0);
  cached_at_.resize(size_t(total));
  published_.resize(size_t(total), nullptr);
  for (int64_t p = total - 1; p >= before; --p) unused_.push_back(int32_t(p));  // lowest first out
  pages_ = total;
}

int32_t KvPool::take_page() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (unused_.empty() && cached_.empty()) grow_to(2 * pages_.load());
  int32_t page;
  if (!unused_.empty()) {
    page = unused_.back();
    unused_.pop_back();
  } else {  // the cached prefix page released longest ago gives way
    page = cached_.front();
    cached_.pop_front();
    --cached_count_;
    index_.erase(*published_[size_t(page)]);
    published_[size_t(page)] = nullptr;
  }
  holders_[size_t(page)] = 1;
  ++held_;
  return page;
}

void KvPool::hold(int32_t page) {
  if (holders_[size_t(page)]++ > 0) return;
  cached_.erase(cached_at_[size_t(page)]);
  --cached_count_;
  ++held_;
}

void KvPool::release(int32_t page) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--holders_[size_t(page)] > 0) return;
  --held_;
  if (!published_[size_t(page)]) return unused_.push_back(page);
  cached_at_[size_t(page)] = cached_.insert(cached_.end(), page);
  ++cached_count_;
}

uint64_t KvPool::publish(int32_t page, const PrefixKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [at, inserted] = index_.try_emplace(key, page, next_id_);
  if (!inserted) return at->second.second;
  published_[size_t(page)] = &at->first;
  return next_id_++;
}

int32_t KvPool::find(const PrefixKey& key, uint64_t* id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto at = index_.find(key);
  if (at == index_.end()) return -1;
  hold(at->second.first);
  *id = at->second.second;
  return at->second.first;
}

KvCache::KvCache(std::shared_ptr<KvPool> pool, int64_t capacity) : pool_(std::move(pool)), capacity_(capacity) {}

KvCache& KvCache::operator=(KvCache&& other) noexcept {
  if (this == &other) return *this;
  clear();
  pool_ = std::move(other.pool_);
  capacity_ = other.capacity_;
  length_ = std::exchange(other.length_, 0);
  pages_ = std::move(other.pages_);
  tokens_ = std::move(other.tokens_);
  last_published_id_ = std::exchange(other.last_published_id_, 0);
  published_pages_ = std::exchange(other.published_pages_, 0);
  shares_prefixes_ = other.shares_prefixes_;
  other.pages_.clear();
  other.tokens_.clear();
  return *this;
}

void KvCache::clear() {
  for (int32_t page : pages_) pool_->release(page);
  pages_.clear();
  tokens_.clear();
  length_ = 0;
  last_published_id_ = 0;
  published_pages_ = 0;
  adopted_ = 0;
}

int64_t KvCache::adopt_prefix(std::span<const int32_t> ids) {
  KILN_CHECK(pool_ && length_ == 0 && pages_.empty(), "kv cache: a prefix is adopted by an empty cache only");
  const int64_t P = pool_->layout().page_size;
  const int64_t whole = shares_prefixes_ ? (int64_t(ids.size()) - 1) / P : 0;
  for (int64_t i = 0; i < whole; ++i) {
    KvPool::PrefixKey key{last_published_id_, {ids.begin() + i * P, ids.begin() + (i + 1) * P}};
    uint64_t id = 0;
    const int32_t page = pool_->find(key, &id);
    if (page < 0) break;
    pages_.push_back(page);
    tokens_.insert(tokens_.end(), key.second.begin(), key.second.end());
    last_published_id_ = id;
    ++published_pages_;
  }
  length_ = adopted_ = int64_t(tokens_.size());
  pool_->reused_ += length_;
  return length_;
}

void KvCache::reserve(int64_t n) {
  KILN_CHECK(pool_, "kv cache: this cache has no pool (make it with the model's new_cache())");
  KILN_CHECK(length_ + n <= capacity_, "the generation cache holds ", capacity_, " positions; ", length_ + n,
             " do not fit");
  const KvLayout& layout = pool_->layout();
  while (int64_t(pages_.size()) < layout.pages_for(length_ + n)) pages_.push_back(pool_->take_page());
  tokens_.reserve(pages_.size() * size_t(layout.page_size));
}

int32_t KvCache::slot(int64_t pos) const {
  const int64_t P = pool_->layout().page_size;
  return int32_t(pages_[size_t(pos / P)] * P + pos % P);
}

void KvCache::commit(std::span<const int32_t> tokens) {
  const int64_t P = pool_->layout().page_size;
  KILN_CHECK(int64_t(pages_.size()) * P >= length_ + int64_t(tokens.size()),
             "kv cache: commit positions that were reserved first");
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  length_ += int64_t(tokens.size());
  for (; shares_prefixes_ && (published_pages_ + 1) * P <= length_; ++published_pages_) {
    const auto first = tokens_.begin() + published_pages_ * P;
    last_published_id_ = pool_->publish(pages_[size_t(published_pages_)], {last_published_id_, {first, first + P}});
  }
}

// The step's index tensors are written in place (sized first): a decoding
// step's bookkeeping takes nothing from the heap but their storage, which
// the CPU allocator keeps.
PagedStep plan_step(std::span<KvCache* const> caches, std::span<const int64_t> new_positions, int64_t window,
                    Device device, int64_t local_window) {
  KILN_CHECK(!caches.empty() && caches.size() == new_positions.size(), "paged step: ", caches.size(), " caches for ",
             new_positions.size(), " position counts");
  const KvLayout& L = caches.front()->pool().layout();
  int64_t rows = 0;
  size_t widest = 0;
  for (size_t s = 0; s < caches.size(); ++s) {
    KILN_CHECK(&caches[s]->pool() == &caches.front()->pool(), "paged step: the caches come from different pools");
    caches[s]->reserve(new_positions[s]);
    rows += new_positions[s];
    widest = std::max(widest, caches[s]->pages().size());
  }
  Tensor key_offsets = Tensor::empty({rows * L.kv_heads}, DType::i64);
  Tensor value_offsets = Tensor::empty({rows * L.kv_heads}, DType::i64);
  Tensor spans = Tensor::empty({rows, 3}, DType::i32), local_spans;
  if (local_window > 0) local_spans = Tensor::empty({rows, 3}, DType::i32);
  Tensor tables = Tensor::empty({int64_t(caches.size()), int64_t(widest)}, DType::i32);
  int64_t* keys = key_offsets.data<int64_t>();
  int64_t* values = value_offsets.data<int64_t>();
  int32_t* span = spans.data<int32_t>();
  int32_t* local = local_window > 0 ? local_spans.data<int32_t>() : nullptr;
  int32_t* table = tables.data<int32_t>();
  auto first_seen = [](int64_t pos, int64_t w) { return int32_t(w > 0 ? std::max<int64_t>(0, pos + 1 - w) : 0); };
  for (size_t s = 0; s < caches.size(); ++s) {
    const KvCache& cache = *caches[s];
    for (int64_t pos = cache.length(); pos < cache.length() + new_positions[s]; ++pos) {
      const int32_t slot = cache.slot(pos);
      for (int64_t g = 0; g < L.kv_heads; ++g) {
        const int64_t head = int64_t(slot / L.page_size) * L.kv_heads + g, offset = slot % L.page_size;
        *keys++ = head * L.head_dim * L.page_size + offset;
        *values++ = (head * L.page_size + offset) * L.head_dim;
      }
      *span++ = int32_t(s), *span++ = first_seen(pos, window), *span++ = int32_t(pos + 1);
      if (local) *local++ = int32_t(s), *local++ = first_seen(pos, local_window), *local++ = int32_t(pos + 1);
    }
    const std::vector<int32_t>& pages = cache.pages();
    std::copy(pages.begin(), pages.end(), table + s * widest);
    std::fill(table + s * widest + pages.size(), table + (s + 1) * widest, 0);
  }
  PagedStep step;
  step.key_offsets = key_offsets.to(device);
  step.value_offsets = value_offsets.to(device);
  step.tables = tables.to(device);
  step.spans = spans.to(device);
  if (local_window > 0) step.local_spans = local_spans.to(device);
  step.pool = &caches.front()->pool();
  return step;
}

std::span<const int64_t> one_position_each(size_t caches) {
  thread_local std::vector<int64_t> ones;
  ones.assign(caches, 1);
  return ones;
}

RealRows::RealRows(const std::vector<int64_t>& lengths, int64_t T, Device device)
    : all_(int64_t(lengths.size()) * T) {
  for (size_t b = 0; b < lengths.size(); ++b) {
    KILN_CHECK(lengths[b] >= 1 && lengths[b] <= T, "padded batch: row ", b, " has ", lengths[b], " positions of ", T);
    for (int64_t t = 0; t < lengths[b]; ++t) rows_.push_back(int64_t(b) * T + t);
  }
  if (padded()) index_ = Tensor::from_vector(rows_, {int64_t(rows_.size())}).to(device);
}

Tensor RealRows::take(const Tensor& x) const {
  if (!padded()) return x;
  Shape shape = x.shape();
  shape[0] = int64_t(rows_.size());
  return reshape(embedding(reshape(contiguous(x), {all_, x.numel() / all_}), index_), shape);  // a row gather
}

Tensor RealRows::put(const Tensor& x) const {
  if (!padded()) return x;
  const int64_t width = x.numel() / int64_t(rows_.size());
  std::vector<int64_t> starts;
  for (int64_t row : rows_) starts.push_back(row * width);
  Tensor all = zeros({all_, width}, x.dtype(), x.device());
  scatter_rows_(all, Tensor::from_vector(starts, {int64_t(starts.size())}).to(x.device()), 1,
                reshape(x, {int64_t(rows_.size()), width}));
  Shape shape = x.shape();
  shape[0] = all_;
  return reshape(all, shape);
}

void write_paged(const PagedStep& step, int64_t layer, const Tensor& k, const Tensor& v) {
  const KvLayout& L = step.pool->layout();
  const int64_t head_rows = step.key_offsets.size(0);
  scatter_rows_(step.pool->keys(layer), step.key_offsets, L.page_size, reshape(contiguous(k), {head_rows, L.head_dim}));
  scatter_rows_(step.pool->values(layer), step.value_offsets, 1, reshape(contiguous(v), {head_rows, L.head_dim}));
}

Tensor read_paged(const PagedStep& step, int64_t layer, const Tensor& q, double scale, bool local, double softcap) {
  const DType dtype = step.pool->layout().dtype;
  KILN_CHECK(!local || step.local_spans.defined(), "paged step: a local read of a step planned without a local window");
  return paged_attention(q.dtype() == dtype ? q : to_dtype(q, dtype), step.pool->keys(layer),
                         step.pool->values(layer), step.tables, local ? step.local_spans : step.spans, scale, softcap);
}

}  // namespace kiln::nn
