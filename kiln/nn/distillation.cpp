#include "kiln/nn/distillation.h"

#include <vector>

#include "kiln/backend/factory.h"

namespace kiln::nn {

DistillationLoss distillation_loss(const Tensor& student_logits, const Tensor& teacher_logits, const Tensor& targets,
                                   double temperature, double alpha, int64_t ignore_index) {
  KILN_CHECK(temperature > 0, "the distillation temperature must be > 0, got ", temperature);
  KILN_CHECK(alpha >= 0 && alpha <= 1, "the distillation alpha must be in [0, 1], got ", alpha);
  const int64_t V = student_logits.size(-1);
  KILN_CHECK(teacher_logits.shape() == student_logits.shape(), "distillation: the teacher's logits ",
             shape_str(teacher_logits.shape()), " do not match the student's ", shape_str(student_logits.shape()),
             " (a different vocabulary?)");
  // The counted positions' rows (a gather whose backward scatters into the student's logits).
  std::vector<int64_t> rows, kept;
  const std::vector<int64_t> t = contiguous(targets).to(Device::cpu()).to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] != ignore_index) {
      rows.push_back(int64_t(i));
      kept.push_back(t[i]);
    }
  KILN_CHECK(!rows.empty(), "distillation: no position has a target to learn");
  const Device device = student_logits.device();
  const Tensor index = Tensor::from_vector<int64_t>(rows, {int64_t(rows.size())}).to(device);
  const Tensor student = embedding(reshape(student_logits, {-1, V}), index);  // [n, V]
  const double n = double(rows.size());
  Tensor teacher_log_p;
  {
    NoGradGuard frozen;
    const Tensor teacher = embedding(reshape(teacher_logits.detach(), {-1, V}), index);
    teacher_log_p = log_softmax(mul_scalar(to_dtype(teacher, DType::f32), 1.0 / temperature), -1);
  }
  const Tensor teacher_p = exp(teacher_log_p);
  const Tensor student_log_p = log_softmax(mul_scalar(to_dtype(student, DType::f32), 1.0 / temperature), -1);
  // KL = sum p_t (log p_t - log p_s), per position, averaged.
  const Tensor kl = mul_scalar(sum(mul(teacher_p, sub(teacher_log_p, student_log_p))), 1.0 / n);
  const Tensor hard = cross_entropy(to_dtype(student, DType::f32),
                                    Tensor::from_vector<int64_t>(kept, {int64_t(kept.size())}).to(device));
  DistillationLoss out;
  out.loss = add(mul_scalar(kl, alpha * temperature * temperature), mul_scalar(hard, 1.0 - alpha));
  out.kl = kl.item();
  out.hard = hard.item();
  return out;
}

}  // namespace kiln::nn
