// The Gloo transport behind world.cpp for a torchrun-style launch (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT; gloo_communicator.cpp), or a stub
// that explains what to install when Kiln was built without Gloo.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "kiln/distributed/communicator.h"
#include "kiln/distributed/tcp_store.h"

namespace kiln::distributed {

struct TcpLaunch {
  int rank = 0, world_size = 1;
  std::string master_addr;  // rank 0's host, where the rendezvous runs
  int master_port = 0;
  std::chrono::seconds rendezvous_timeout{300};
  StoreAccess access;  // KILN_RENDEZVOUS_TOKEN and KILN_RENDEZVOUS_BIND
};

// Meets the other ranks at MASTER_ADDR:MASTER_PORT and connects to each.
std::unique_ptr<Communicator> make_gloo_communicator(const TcpLaunch& launch);

}  // namespace kiln::distributed
