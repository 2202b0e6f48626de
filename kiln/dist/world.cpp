#include "kiln/dist/world.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/dist/mpi_transport.h"
#include "kiln/dist/nccl_transport.h"

namespace kiln::dist {

namespace {

std::unique_ptr<Communicator>& the_world() {
  static std::unique_ptr<Communicator> w;
  return w;
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace

void init_from_environment(int* argc, char*** argv) {
  if (the_world()) return;
  if (launched_by_mpi()) {
    // CUDA tensors over NCCL, host tensors over MPI (which throws with what to install when built without it).
    the_world() = with_nccl(make_mpi_communicator(argc, argv));
    std::atexit(finalize);
  } else {
    the_world() = make_single_communicator();
  }
}

void finalize() {
  if (the_world() && the_world()->transport().starts_with("mpi")) finalize_mpi();
}

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (the_world() && the_world()->transport().starts_with("mpi")) abort_mpi(exit_code);
  std::_Exit(exit_code);
}

Communicator& world() {
  if (!the_world()) the_world() = make_single_communicator();
  return *the_world();
}

std::string rank_prefix() {
  if (world_size() == 1) return "";
  return "rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) + ": ";
}

void rank0_first(const std::function<void()>& f) {
  if (is_rank0()) f();
  world().barrier();
  if (!is_rank0()) f();
}

}  // namespace kiln::dist
