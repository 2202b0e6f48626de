#include "kiln/cpu/dnnl_context.h"

#ifdef KILN_HAVE_DNNL
namespace kiln::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

}  // namespace kiln::cpu
#endif
