#include "kiln/amp/autocast.h"

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/ops.h"

namespace kiln::amp {

namespace {

thread_local std::optional<DType> t_autocast_dtype;
thread_local WeightCastCache* t_weight_casts = nullptr;

bool is_low_precision(DType t) { return t == DType::bf16 || t == DType::f16; }

int float_rank(DType t) {
  switch (t) {
    case DType::f64: return 3;
    case DType::f32: return 2;
    case DType::bf16:
    case DType::f16: return 1;
    default: return 0;
  }
}

// Under autocast: f32 and the other 16-bit dtype are lowered; f64 (the
// gradient-check reference) and integers are not.
bool lowers(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::f32 || is_low_precision(t.dtype())) && t.dtype() != *t_autocast_dtype;
}

}  // namespace

std::optional<DType> autocast_dtype() { return t_autocast_dtype; }

AutocastGuard::AutocastGuard(DType dtype) : previous_(t_autocast_dtype) {
  KILN_CHECK(dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f32,
             "autocast: dtype must be bf16 or f16 (or f32 to turn autocast off), got ", dtype_name(dtype));
  t_autocast_dtype = dtype == DType::f32 ? std::nullopt : std::optional<DType>(dtype);
}

AutocastGuard::~AutocastGuard() { t_autocast_dtype = previous_; }

bool autocast_should_lower(std::initializer_list<const Tensor*> inputs) {
  if (!t_autocast_dtype) return false;
  for (const Tensor* t : inputs)
    if (t && lowers(*t)) return true;
  return false;
}

Tensor autocast_lower(const Tensor& t) {
  if (!t_autocast_dtype || !lowers(t)) return t;
  if (t_weight_casts && t.is_leaf() && t.requires_grad()) return t_weight_casts->cast(t, *t_autocast_dtype);
  return to_dtype(t, *t_autocast_dtype);
}

WeightCastCache::Scope::Scope(WeightCastCache& cache) : previous_(t_weight_casts) { t_weight_casts = &cache; }
WeightCastCache::Scope::~Scope() { t_weight_casts = previous_; }

Tensor WeightCastCache::cast(const Tensor& t, DType dtype) {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto [it, added] = casts_.try_emplace({t.impl_ptr().get(), dtype});
  if (added) {
    NoGradGuard no_grad;  // a served model's casts carry no history
    it->second = {t, to_dtype(t, dtype)};
  }
  return it->second.cast;
}

size_t WeightCastCache::size() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return casts_.size();
}

bool autocast_should_upcast(std::initializer_list<const Tensor*> inputs) {
  if (!t_autocast_dtype) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && is_low_precision(t->dtype())) return true;
  return false;
}

Tensor autocast_upcast(const Tensor& t) {
  if (!t.defined() || !is_low_precision(t.dtype())) return t;
  return to_dtype(t, DType::f32);
}

DType promote_float_dtypes(DType a, DType b) {
  KILN_CHECK(float_rank(a) > 0 && float_rank(b) > 0, "type promotion: ", dtype_name(a), " and ", dtype_name(b),
             " are not both floating; convert one with .to(dtype)");
  if (a == b) return a;
  if (float_rank(a) != float_rank(b)) return float_rank(a) > float_rank(b) ? a : b;
  return DType::f32;  // bf16 with f16: neither holds the other's values, f32 holds both
}

bool needs_promotion(const Tensor& a, const Tensor& b) {
  return a.dtype() != b.dtype() && dtype_is_floating(a.dtype()) && dtype_is_floating(b.dtype());
}

Tensor promote(const Tensor& x, const Tensor& other) {
  return to_dtype(x, promote_float_dtypes(x.dtype(), other.dtype()));
}

}  // namespace kiln::amp
