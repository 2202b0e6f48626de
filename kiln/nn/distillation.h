// Knowledge distillation (Hinton et al., 2015), as transformers' and TRL's
// distillation trainers compute it: over the positions whose target counts
// (not ignore_index),
//   alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T))
//   + (1 - alpha) * cross_entropy(student, targets),
// the KL averaged over those positions. T^2 keeps the soft targets'
// gradients on the hard loss's scale as T grows.
#pragma once
#include "kiln/autograd/ops.h"

namespace kiln::nn {

struct DistillationLoss {
  Tensor loss;     // what backward runs on
  double kl = 0;   // the two parts, for logs and tests
  double hard = 0;
};

// student_logits, teacher_logits: [..., V]; targets: [...] (i64, -100: not counted).
// The teacher's logits take no gradient.
DistillationLoss distillation_loss(const Tensor& student_logits, const Tensor& teacher_logits, const Tensor& targets,
                                   double temperature, double alpha, int64_t ignore_index = -100);

}  // namespace kiln::nn
