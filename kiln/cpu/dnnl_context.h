// The one CPU engine Kiln's oneDNN primitives run on, and the calling
// thread's stream to it (made once per thread, not per call).
#pragma once
#ifdef KILN_HAVE_DNNL
#include <dnnl.hpp>

namespace kiln::cpu {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();

}  // namespace kiln::cpu
#endif
