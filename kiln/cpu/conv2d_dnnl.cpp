#include "kiln/cpu/conv2d_dnnl.h"

#ifdef KILN_HAVE_DNNL
#include <omp.h>

#include <algorithm>
#include <array>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#endif

#include "kiln/core/allocator.h"
#include "kiln/core/tensor.h"
#include "kiln/cpu/dnnl_context.h"
#include "kiln/cpu/gemm.h"

namespace kiln::cpu::dnnl_conv {

#ifndef KILN_HAVE_DNNL

bool usable(const Shape&, const Shape&, DType) { return false; }
std::vector<int64_t> scratch_bytes(const Shape&, const Shape&, const Conv2dArgs&, const ConvScratchPass&, DType) {
  return {};
}
void forward(const Tensor&, const Tensor&, const Tensor&, Tensor&, const Conv2dArgs&) {
  KILN_FAIL("conv2d: this build has no oneDNN");
}
void backward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, const Conv2dArgs&) {
  KILN_FAIL("conv2d_backward: this build has no oneDNN");
}

#else

namespace {

using dnnl::memory;
using tag = memory::format_tag;

// One operand in Kiln's plain layout and in the layout a primitive wants,
// with the reorder between them when the two differ.
struct Layout {
  memory::desc plain, wanted;
  dnnl::reorder reorder;
  bool staged() const { return !(plain == wanted); }
};

Layout into(const memory::desc& plain, const memory::desc& wanted) {
  Layout l{plain, wanted, {}};
  if (l.staged())
    l.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), plain, dnnl_engine(), wanted));
  return l;
}
Layout out_of(const memory::desc& wanted, const memory::desc& plain) {
  Layout l{plain, wanted, {}};
  if (l.staged())
    l.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), wanted, dnnl_engine(), plain));
  return l;
}

// The primitives for one convolution geometry, made once. Their scratchpads
// are Kiln workspace tensors (scratchpad_mode::user), so memory is counted.
struct Primitives {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_weights::primitive_desc weights_pd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights weights;
  // forward
  Layout x_fwd, w_fwd, y_fwd;
  // backward: data (dout, w -> dx) and weights (dout, x -> dw)
  Layout dout_data, w_data, dx_data, dout_weights, x_weights, dw_weights;
};

using Key = std::array<int64_t, 14>;

Key key_of(const Shape& x, const Shape& w, const Conv2dArgs& a, bool bias, DType dtype) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], a.stride_h, a.stride_w, a.pad_h, a.pad_w, bias,
          omp_get_max_threads(), int64_t(dtype)};
}

// dtype is that of x, the weight, the output and the gradients (f32 or
// bf16); the bias stays f32.
std::unique_ptr<Primitives> make_primitives(const Shape& x, const Shape& w, const Conv2dArgs& a, bool bias,
                                            DType dtype) {
  const int64_t OH = (x[2] + 2 * a.pad_h - w[2]) / a.stride_h + 1, OW = (x[3] + 2 * a.pad_w - w[3]) / a.stride_w + 1;
  const memory::dims strides{a.stride_h, a.stride_w}, pad{a.pad_h, a.pad_w};
  const auto f32 = memory::data_type::f32;
  const auto dt = dtype == DType::bf16 ? memory::data_type::bf16 : f32;
  const memory::desc x_plain({x[0], x[1], x[2], x[3]}, dt, tag::nchw);
  const memory::desc w_plain({w[0], w[1], w[2], w[3]}, dt, tag::oihw);
  const memory::desc y_plain({x[0], w[0], OH, OW}, dt, tag::nchw);
  const memory::desc b_plain({w[0]}, f32, tag::x);
  // "any": let oneDNN choose the blocked layouts its fastest kernels use.
  const memory::desc x_any({x[0], x[1], x[2], x[3]}, dt, tag::any);
  const memory::desc w_any({w[0], w[1], w[2], w[3]}, dt, tag::any);
  const memory::desc y_any({x[0], w[0], OH, OW}, dt, tag::any);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto algo = dnnl::algorithm::convolution_direct;

  auto p = std::make_unique<Primitives>();
  auto fwd_desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_any, w_any,
                                                          b_plain, y_any, strides, pad, pad)
                       : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_any, w_any,
                                                          y_any, strides, pad, pad);
  p->fwd_pd = dnnl::convolution_forward::primitive_desc(fwd_desc, attr, dnnl_engine());
  p->data_pd = dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(algo, x_any, w_any, y_any, strides, pad, pad), attr, dnnl_engine(),
      p->fwd_pd);
  p->weights_pd = dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(algo, x_any, w_any, y_any, strides, pad, pad), attr, dnnl_engine(),
      p->fwd_pd);
  p->fwd = dnnl::convolution_forward(p->fwd_pd);
  p->data = dnnl::convolution_backward_data(p->data_pd);
  p->weights = dnnl::convolution_backward_weights(p->weights_pd);
  p->x_fwd = into(x_plain, p->fwd_pd.src_desc());
  p->w_fwd = into(w_plain, p->fwd_pd.weights_desc());
  p->y_fwd = out_of(p->fwd_pd.dst_desc(), y_plain);
  p->dout_data = into(y_plain, p->data_pd.diff_dst_desc());
  p->w_data = into(w_plain, p->data_pd.weights_desc());
  p->dx_data = out_of(p->data_pd.diff_src_desc(), x_plain);
  p->dout_weights = into(y_plain, p->weights_pd.diff_dst_desc());
  p->x_weights = into(x_plain, p->weights_pd.src_desc());
  p->dw_weights = out_of(p->weights_pd.diff_weights_desc(), w_plain);
  return p;
}

// Made once per geometry and thread count (oneDNN sizes its kernels' work
// split by the threads available when a primitive is created).
const Primitives& primitives(const Shape& x, const Shape& w, const Conv2dArgs& a, bool bias, DType dtype) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Primitives>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Primitives>& p = cache[key_of(x, w, a, bias, dtype)];
  if (!p) {
    try {
      p = make_primitives(x, w, a, bias, dtype);
    } catch (const dnnl::error& e) {
      KILN_FAIL("oneDNN could not set up a convolution of x ", shape_str(x), " with weight ", shape_str(w), ": ",
                e.what());
    }
  }
  return *p;
}

// What one call stages, in allocation order: the layouts that need a blocked
// copy (the backward's dout is staged once when both passes want the same
// layout), then the scratchpad.
struct CallPlan {
  std::vector<const Layout*> staged;
  size_t scratchpad = 0;
};

CallPlan plan_call(const Primitives& p, const ConvScratchPass& pass) {
  CallPlan plan;
  auto stage = [&](const Layout& l) {
    if (l.staged()) plan.staged.push_back(&l);
  };
  if (!pass.backward) {
    stage(p.x_fwd), stage(p.w_fwd), stage(p.y_fwd);
    plan.scratchpad = p.fwd_pd.scratchpad_desc().get_size();
    return plan;
  }
  if (pass.dx) {
    stage(p.dout_data), stage(p.w_data), stage(p.dx_data);
    plan.scratchpad = p.data_pd.scratchpad_desc().get_size();
  }
  if (pass.dweight) {
    if (!pass.dx || !(p.dout_weights.wanted == p.dout_data.wanted)) stage(p.dout_weights);
    stage(p.x_weights), stage(p.dw_weights);
    plan.scratchpad = std::max(plan.scratchpad, p.weights_pd.scratchpad_desc().get_size());
  }
  return plan;
}

// The workspace tensors of one call, and oneDNN memory objects over them.
class CallBuffers {
 public:
  CallBuffers(const CallPlan& plan, Device device) : plan_(plan) {
    MemoryCategoryScope scope(MemoryCategory::workspace);
    for (const Layout* l : plan.staged) tensors_.push_back(bytes(l->wanted.get_size(), device));
    if (plan.scratchpad) scratchpad_ = bytes(plan.scratchpad, device);
  }
  // An input in the layout the primitive wants: the Kiln tensor itself, or
  // its staged copy.
  memory in(const Layout& l, const Tensor& t, dnnl::stream& s) const {
    memory plain(l.plain, dnnl_engine(), t.data_ptr());
    if (!l.staged()) return plain;
    memory staged = buffer(l);
    l.reorder.execute(s, plain, staged);
    return staged;
  }
  // Hands a primitive its scratchpad (the one buffer, sized for the largest).
  void add_scratchpad(std::unordered_map<int, memory>& args, const memory::desc& d) const {
    if (d.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = memory(d, dnnl_engine(), scratchpad_.data_ptr());
  }
  // The staged buffer of layout l.
  memory buffer(const Layout& l) const {
    for (size_t i = 0; i < plan_.staged.size(); ++i)
      if (plan_.staged[i] == &l) return memory(l.wanted, dnnl_engine(), tensors_[i].data_ptr());
    KILN_FAIL("internal: a oneDNN convolution operand has no staging buffer");
  }
  // Where a primitive writes an output: Kiln's tensor, or its staged buffer.
  memory out(const Layout& l, Tensor& t) const {
    return l.staged() ? buffer(l) : memory(l.plain, dnnl_engine(), t.data_ptr());
  }

 private:
  static Tensor bytes(size_t n, Device device) { return Tensor::empty({int64_t((n + 3) / 4)}, DType::f32, device); }
  const CallPlan& plan_;
  std::vector<Tensor> tensors_;
  Tensor scratchpad_;
};

// Writes a primitive's output to Kiln's tensor: directly, or through its
// staged buffer and a reorder.
void write_back(const Layout& l, memory result, Tensor& t, dnnl::stream& s) {
  memory plain(l.plain, dnnl_engine(), t.data_ptr());
  if (l.staged()) l.reorder.execute(s, result, plain);
}

}  // namespace

bool usable(const Shape& x, const Shape& w, DType dtype) {
  const bool bf16 = dtype == DType::bf16 && bf16_gemm_available();
  if ((dtype != DType::f32 && !bf16) || x.size() != 4 || w.size() != 4) return false;
  for (int64_t d : x) if (d == 0) return false;
  for (int64_t d : w) if (d == 0) return false;
  return true;
}

std::vector<int64_t> scratch_bytes(const Shape& x, const Shape& w, const Conv2dArgs& a, const ConvScratchPass& pass,
                                   DType dtype) {
  const Primitives& p = primitives(x, w, a, pass.bias, dtype);
  const CallPlan plan = plan_call(p, pass);
  std::vector<int64_t> sizes;
  for (const Layout* l : plan.staged) sizes.push_back(int64_t(l->wanted.get_size()));
  if (plan.scratchpad) sizes.push_back(int64_t(plan.scratchpad));
  return sizes;
}

void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, const Conv2dArgs& args) {
  KILN_CHECK(!bias.defined() || bias.dtype() == DType::f32, "conv2d: oneDNN takes an f32 bias");
  const Primitives& p = primitives(x.shape(), weight.shape(), args, bias.defined(), x.dtype());
  ConvScratchPass pass;
  pass.bias = bias.defined();
  const CallPlan plan = plan_call(p, pass);
  CallBuffers buffers(plan, x.device());
  dnnl::stream& s = dnnl_stream();
  try {
    const memory dst = buffers.out(p.y_fwd, out);
    std::unordered_map<int, memory> io{{DNNL_ARG_SRC, buffers.in(p.x_fwd, x, s)},
                                       {DNNL_ARG_WEIGHTS, buffers.in(p.w_fwd, weight, s)},
                                       {DNNL_ARG_DST, dst}};
    if (bias.defined()) io[DNNL_ARG_BIAS] = memory(p.fwd_pd.bias_desc(), dnnl_engine(), bias.data_ptr());
    buffers.add_scratchpad(io, p.fwd_pd.scratchpad_desc());
    p.fwd.execute(s, io);
    write_back(p.y_fwd, dst, out, s);
    s.wait();
  } catch (const dnnl::error& e) {
    KILN_FAIL("oneDNN convolution failed for x ", shape_str(x.shape()), ": ", e.what());
  }
}

void backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx, Tensor& dweight,
              const Conv2dArgs& args) {
  if (!dx.defined() && !dweight.defined()) return;
  const Primitives& p = primitives(x.shape(), weight.shape(), args, false, x.dtype());
  ConvScratchPass pass;
  pass.backward = true;
  pass.dx = dx.defined();
  pass.dweight = dweight.defined();
  const CallPlan plan = plan_call(p, pass);
  CallBuffers buffers(plan, x.device());
  dnnl::stream& s = dnnl_stream();
  try {
    memory ddst_data;
    if (dx.defined()) {
      ddst_data = buffers.in(p.dout_data, dout, s);
      const memory dsrc = buffers.out(p.dx_data, dx);
      std::unordered_map<int, memory> io{
          {DNNL_ARG_DIFF_DST, ddst_data}, {DNNL_ARG_WEIGHTS, buffers.in(p.w_data, weight, s)}, {DNNL_ARG_DIFF_SRC, dsrc}};
      buffers.add_scratchpad(io, p.data_pd.scratchpad_desc());
      p.data.execute(s, io);
      write_back(p.dx_data, dsrc, dx, s);
    }
    if (dweight.defined()) {
      // The data pass already staged dout when both passes want the same layout.
      const bool shared = dx.defined() && p.dout_weights.wanted == p.dout_data.wanted;
      const memory dw = buffers.out(p.dw_weights, dweight);
      std::unordered_map<int, memory> io{{DNNL_ARG_DIFF_DST, shared ? ddst_data : buffers.in(p.dout_weights, dout, s)},
                                         {DNNL_ARG_SRC, buffers.in(p.x_weights, x, s)},
                                         {DNNL_ARG_DIFF_WEIGHTS, dw}};
      buffers.add_scratchpad(io, p.weights_pd.scratchpad_desc());
      p.weights.execute(s, io);
      write_back(p.dw_weights, dw, dweight, s);
    }
    s.wait();
  } catch (const dnnl::error& e) {
    KILN_FAIL("oneDNN convolution backward failed for x ", shape_str(x.shape()), ": ", e.what());
  }
}

#endif  // KILN_HAVE_DNNL

}  // namespace kiln::cpu::dnnl_conv
