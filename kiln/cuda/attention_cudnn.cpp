// cuDNN's fused attention (attention_cudnn.h says when it is taken). One
// graph is built per pass, shape, strides, dtype, scale and device, the
// first time it is met (cuDNN picks and compiles its kernel then: tens to
// hundreds of milliseconds), and kept; later calls only bind pointers.
// cuDNN calls go through the frontend's loader (NV_CUDNN_FRONTEND_USE_
// DYNAMIC_LOADING), pointed at the library opened here.
#include "kiln/cuda/attention_cudnn.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/cuda/cuda_util.h"

#if KILN_HAVE_CUDNN
#include <cudnn_frontend.h>
#include <dlfcn.h>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's calls resolve their symbols here
}
#endif

namespace kiln::cuda {
namespace {

std::atomic<bool> enabled{true};

}  // namespace

void set_cudnn_attention_enabled(bool on) { enabled = on; }

#if !KILN_HAVE_CUDNN

bool cudnn_attention(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, float, bool) { return false; }
bool cudnn_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              Tensor&, Tensor&, Tensor&, float, bool) {
  return false;
}
std::string cudnn_attention_status() {
  return "not built (no cuDNN or cuDNN frontend headers at build time: "
         "scripts/cudnn_frontend.sh)";
}

#else

namespace fe = cudnn_frontend;

namespace {

// The tensors' ids in a graph's variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kOut, kLse, kDout, kDq, kDk, kDv };

struct Library {
  bool loaded = false;
  std::string status;
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    const char* env = std::getenv("KILN_CUDNN");
    if (env && std::strcmp(env, "0") == 0) {
      l.status = "off (KILN_CUDNN=0): Kiln's attention kernels run";
      return l;
    }
    void* handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      const char* why = dlerror();
      l.status =
          std::string("libcudnn.so.9 not loaded (") + (why ? why : "not found") + "): Kiln's attention kernels run";
      return l;
    }
    fe::cudnn_dlhandle = handle;
    auto version = reinterpret_cast<size_t (*)()>(dlsym(handle, "cudnnGetVersion"));
    const size_t v = version ? version() : 0;
    if (v < 90000) {
      l.status = "libcudnn " + std::to_string(v) + " is older than 9.0: Kiln's attention kernels run";
      return l;
    }
    l.loaded = true;
    l.status = "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
               std::to_string(v % 100) + " fused attention (bf16/f16, head dim 64 and 128)";
    return l;
  }();
  return lib;
}

// A built graph and its workspace, or none where cuDNN declined the shape.
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
};

struct Cache {
  std::mutex mutex;
  std::map<int, cudnnHandle_t> handles;
  std::map<std::string, Plan> plans;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: graphs outlive static destruction order
  return *c;
}

cudnnHandle_t handle_for(int device) {
  Cache& c = cache();
  auto it = c.handles.find(device);
  if (it != c.handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t status = fe::detail::create_handle(&h);
  KILN_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN: cudnnCreate failed on cuda:", device, " (status ", int(status),
             "); set KILN_CUDNN=0 to run attention on Kiln's own kernels");
  return c.handles[device] = h;
}

// What a graph is built for: the pass, dtype, device, scale, mask, and each
// tensor's shape and strides (the strides are baked into the graph).
std::string plan_key(const char* pass, const Tensor& q, float scale, bool causal,
                     std::initializer_list<const Tensor*> tensors) {
  std::ostringstream key;
  key << pass << ' ' << dtype_name(q.dtype()) << " cuda:" << q.device().index << (causal ? " causal " : " ")
      << std::hexfloat << scale << std::dec;
  for (const Tensor* t : tensors) {
    key << ' ';
    for (int64_t d : t->shape()) key << d << ',';
    key << '/';
    for (int64_t s : t->strides()) key << s << ',';
  }
  return key.str();
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, Uid uid, const char* name, const Tensor& t) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(std::vector<int64_t>(t.shape()))
                      .set_stride(std::vector<int64_t>(t.strides())));
}

void output(const std::shared_ptr<fe::graph::Tensor_attributes>& attr, Uid uid, const Tensor& t) {
  attr->set_output(true)
      .set_uid(uid)
      .set_dim(std::vector<int64_t>(t.shape()))
      .set_stride(std::vector<int64_t>(t.strides()));
}

// lse [B, H, T] as cuDNN's stats [B, H, T, 1], f32.
std::vector<int64_t> stats_dims(const Tensor& lse) { return {lse.size(0), lse.size(1), lse.size(2), 1}; }
std::vector<int64_t> stats_strides(const Tensor& lse) { return {lse.size(1) * lse.size(2), lse.size(2), 1, 1}; }

// Whether cuDNN may run this call at all (the library, the switch, the dtypes).
bool usable(const Tensor& q, const Tensor& lse) {
  if (!enabled || !library().loaded) return false;
  return (q.dtype() == DType::bf16 || q.dtype() == DType::f16) && lse.dtype() == DType::f32 && lse.is_contiguous();
}

// The plan for `key`, built by `make` the first time (under the cache's lock).
template <typename Make>
const Plan& plan_for(const std::string& key, const char* pass, const Tensor& q, Make&& make) {
  const int device = q.device().index;
  Cache& c = cache();
  auto it = c.plans.find(key);
  if (it != c.plans.end()) return it->second;
  auto graph = std::make_shared<fe::graph::Graph>();
  make(*graph);
  Plan plan;
  fe::error_t status = graph->build(handle_for(device), {fe::HeurMode_t::A});
  if (status.is_good()) status = graph->get_workspace_size(plan.workspace_bytes);
  if (status.is_good())
    plan.graph = graph;
  else  // once per shape: later calls of it go straight to Kiln's kernels
    std::fprintf(stderr, "kiln: cuDNN declined %s %s %s (%s); Kiln's kernel runs it\n", pass, dtype_name(q.dtype()),
                 shape_str(q.shape()).c_str(), status.get_message().c_str());
  return c.plans[key] = plan;
}

void run(const Plan& plan, int device, std::unordered_map<int64_t, void*>& pack, const char* op) {
  cudnnHandle_t h = handle_for(device);
  fe::detail::set_stream(h, stream_for(device));
  Tensor workspace;
  if (plan.workspace_bytes > 0) workspace = empty_workspace({plan.workspace_bytes}, DType::u8, Device::cuda(device));
  fe::error_t status = plan.graph->execute(h, pack, workspace.defined() ? workspace.data_ptr() : nullptr);
  KILN_CHECK(status.is_good(), op, ": cuDNN failed to run its attention graph (", status.get_message(),
             "); set KILN_CUDNN=0 to run attention on Kiln's own kernels");
}

fe::DataType_t io_type(const Tensor& q) {
  return q.dtype() == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

}  // namespace

std::string cudnn_attention_status() { return library().status; }

bool cudnn_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                     bool causal) {
  if (!usable(q, lse)) return false;
  const std::string key = plan_key("attention", q, scale, causal, {&q, &k, &v, &out});
  std::lock_guard<std::mutex> lock(cache().mutex);
  const Plan& plan = plan_for(key, "attention", q, [&](fe::graph::Graph& g) {
    g.set_io_data_type(io_type(q))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_attn_scale(scale);
    if (causal) options.set_causal_mask(true);
    auto [o, stats] = g.sdpa(input(g, kQ, "q", q), input(g, kK, "k", k), input(g, kV, "v", v), options);
    output(o, kOut, out);
    stats->set_output(true)
        .set_uid(kLse)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims(lse))
        .set_stride(stats_strides(lse));
  });
  if (!plan.graph) return false;
  std::unordered_map<int64_t, void*> pack = {
      {kQ, q.data_ptr()}, {kK, k.data_ptr()}, {kV, v.data_ptr()}, {kOut, out.data_ptr()}, {kLse, lse.data_ptr()}};
  run(plan, q.device().index, pack, "attention");
  return true;
}

bool cudnn_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, float scale, bool causal) {
  if (!usable(q, lse)) return false;
  const std::string key = plan_key("attention_backward", q, scale, causal, {&dout, &q, &k, &v, &out, &dq, &dk, &dv});
  std::lock_guard<std::mutex> lock(cache().mutex);
  const Plan& plan = plan_for(key, "attention_backward", q, [&](fe::graph::Graph& g) {
    g.set_io_data_type(io_type(q))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto stats = g.tensor(fe::graph::Tensor_attributes()
                              .set_name("lse")
                              .set_uid(kLse)
                              .set_dim(stats_dims(lse))
                              .set_stride(stats_strides(lse))
                              .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_attn_scale(scale)
                       .set_deterministic_algorithm(true);
    if (causal) options.set_causal_mask(true);
    auto [gq, gk, gv] = g.sdpa_backward(input(g, kQ, "q", q), input(g, kK, "k", k), input(g, kV, "v", v),
                                        input(g, kOut, "out", out), input(g, kDout, "dout", dout), stats, options);
    output(gq, kDq, dq);
    output(gk, kDk, dk);
    output(gv, kDv, dv);
  });
  if (!plan.graph) return false;
  std::unordered_map<int64_t, void*> pack = {{kQ, q.data_ptr()},     {kK, k.data_ptr()},     {kV, v.data_ptr()},
                                             {kOut, out.data_ptr()}, {kLse, lse.data_ptr()}, {kDout, dout.data_ptr()},
                                             {kDq, dq.data_ptr()},   {kDk, dk.data_ptr()},   {kDv, dv.data_ptr()}};
  run(plan, q.device().index, pack, "attention_backward");
  return true;
}

#endif

}  // namespace kiln::cuda
