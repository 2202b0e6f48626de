#include "kiln/distributed/world.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/core/error.h"
#include "kiln/distributed/gloo_transport.h"
#include "kiln/distributed/mpi_transport.h"
#include "kiln/distributed/nccl_transport.h"

namespace kiln::distributed {

namespace {

std::unique_ptr<Communicator>& the_world() {
  static std::unique_ptr<Communicator> w;
  return w;
}

// A torchrun-style launch joins on first use of world(), after the command
// line has set how long the rendezvous may take.
bool join_pending = false;
std::chrono::seconds rendezvous_timeout{300};

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

// torchrun's convention (also a shell loop's): RANK and WORLD_SIZE set.
bool launched_torchrun_style() { return std::getenv("RANK") && std::getenv("WORLD_SIZE"); }

// The integer in environment variable `name` (`fallback` when unset).
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (!text) return fallback;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  KILN_CHECK(*text && *end == '\0' && v >= 0 && v <= 1 << 30, name, "='", text, "' is not a count or an index");
  return int(v);
}

// Where to meet the other ranks (RANK and WORLD_SIZE are read already).
void read_master_address(TcpLaunch& launch) {
  const char* addr = std::getenv("MASTER_ADDR");
  KILN_CHECK(addr && *addr && std::getenv("MASTER_PORT"), "RANK and WORLD_SIZE are set (a torchrun-style launch) but ",
             addr && *addr ? "MASTER_PORT" : "MASTER_ADDR", " is not: set MASTER_ADDR to rank 0's host and "
             "MASTER_PORT to a free port there, the same for every rank");
  launch.master_addr = addr;
  launch.master_port = env_int("MASTER_PORT", 0);
  // torchrun's static rendezvous keeps MASTER_PORT for its own store (PyTorch's
  // protocol, which Kiln does not speak) and says so in this variable; rank 0
  // then serves Kiln's on the next port.
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE"); agent && std::string(agent) == "True")
    launch.master_port += 1;
  KILN_CHECK(launch.master_port > 0 && launch.master_port < 65536, "MASTER_PORT=", launch.master_port,
             " is not a TCP port (1-65535)");
  if (const char* token = std::getenv("KILN_RENDEZVOUS_TOKEN")) launch.access.token = token;
  if (const char* bind = std::getenv("KILN_RENDEZVOUS_BIND")) launch.access.bind_address = bind;
}

std::unique_ptr<Communicator> join_gloo_world() {
  TcpLaunch launch;
  launch.rank = env_int("RANK", 0);
  launch.world_size = env_int("WORLD_SIZE", 1);
  launch.rendezvous_timeout = rendezvous_timeout;
  KILN_CHECK(launch.rank < launch.world_size, "RANK=", launch.rank, " does not exist in WORLD_SIZE=",
             launch.world_size, " (ranks count from 0)");
  if (launch.world_size == 1) return make_single_communicator();
  read_master_address(launch);
  // A peer that died closes its sockets; writing to one must be an error
  // that names the operation, not a silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return make_gloo_communicator(launch);
  } catch (const Error& e) {
    KILN_FAIL("rank ", launch.rank, " of ", launch.world_size, ": ", e.what());
  }
}

}  // namespace

void init_from_environment(int* argc, char*** argv) {
  if (the_world()) return;
  if (launched_by_mpi()) {
    // CUDA tensors over NCCL, host tensors over MPI (which throws with what to install when built without it).
    the_world() = with_nccl(make_mpi_communicator(argc, argv));
    std::atexit(finalize);
  } else if (launched_torchrun_style()) {
    join_pending = true;
  } else {
    the_world() = make_single_communicator();
  }
}

void finalize() {
  if (the_world() && the_world()->transport().starts_with("mpi")) finalize_mpi();
}

// Gloo has no abort: this rank exits, its connections close, and the other
// ranks' next operation fails (or times out) and ends them.
void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (the_world() && the_world()->transport().starts_with("mpi")) abort_mpi(exit_code);
  std::_Exit(exit_code);
}

void set_rendezvous_timeout(std::chrono::seconds timeout) { rendezvous_timeout = timeout; }

Communicator& world() {
  if (join_pending) {
    join_pending = false;
    the_world() = make_single_communicator();  // what the error path sees if joining fails
    the_world() = with_nccl(join_gloo_world());  // throws with what to install when built without Gloo
  }
  if (!the_world()) the_world() = make_single_communicator();
  return *the_world();
}

int local_rank() {
  if (std::getenv("LOCAL_RANK")) return env_int("LOCAL_RANK", 0);
  return env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
}

int local_world_size() {
  if (std::getenv("LOCAL_WORLD_SIZE")) return env_int("LOCAL_WORLD_SIZE", 1);
  return env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
}

int joined_world_size() { return the_world() ? the_world()->world_size() : 1; }

std::string rank_prefix() {
  if (joined_world_size() == 1) return "";
  return "rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) + ": ";
}

void rank0_first(const std::function<void()>& f) {
  if (is_rank0()) f();
  world().barrier();
  if (!is_rank0()) f();
}

}  // namespace kiln::distributed
