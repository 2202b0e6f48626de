// Batch-invariant mode (`kiln serve --batch-invariant`): a request's answer
// has the same bits whatever it was batched with, as "Defeating
// Nondeterminism in LLM Inference" (Thinking Machines, 2025) showed can be
// done. Batching changes the order of the sums inside a matrix product
// (oneDNN picks kernels and blockings by the number of rows) and inside
// attention over padded rows; in this mode:
//  * the CPU's f32 matrix products run kiln/cpu/invariant_gemm.h, whose
//    every output element is one dot product in one fixed order (bf16
//    operands are widened to f32 first);
//  * quantized products always run the decoding kernel (never a prompt's
//    GEMM), which is already row by row;
//  * attention runs paged_attention (backend.h), one fixed order per query
//    row, for prompts as well as decoding, and for encoders' padded batches;
//  * norms and softmax are per row already.
// It costs throughput (docs/PERFORMANCE.md measures how much). The CUDA
// backend has no invariant kernels and refuses the mode.
#pragma once

namespace kiln {

bool batch_invariant();
void set_batch_invariant(bool on);

}  // namespace kiln
