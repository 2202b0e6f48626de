// `kiln serve --precision bf16`: a served model run under bf16 autocast, as
// `kiln train --precision bf16` runs its forward pass (f32 weights, bf16
// products and attention, f32 softmax and norms). On a CPU with bf16
// instructions a batch of texts runs ~1.5x faster (docs/PERFORMANCE.md).
#pragma once
#include <memory>

#include "apps/recipes/inference.h"
#include "kiln/core/dtype.h"

namespace kiln::serve {

// `model` with every call made under AutocastGuard(dtype) on the calling
// thread (the batchers' and the generators' own threads), its weights cast
// once and kept (amp::WeightCastCache), and classifier probabilities handed
// back in f32. dtype f32 returns `model` itself.
std::unique_ptr<recipes::InferenceModel> with_autocast(std::unique_ptr<recipes::InferenceModel> model, DType dtype);

}  // namespace kiln::serve
