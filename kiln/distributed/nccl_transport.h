// The NCCL transport (nccl_communicator.cpp): wraps a host transport (MPI or
// Gloo) so that CUDA tensors go over NCCL and host tensors over the host
// transport. Built without NCCL (or CUDA), it returns the host transport as
// it is, which stages device tensors through host copies.
#pragma once
#include <memory>

#include "kiln/distributed/communicator.h"

namespace kiln::distributed {

std::unique_ptr<Communicator> with_nccl(std::unique_ptr<Communicator> host);

}  // namespace kiln::distributed
