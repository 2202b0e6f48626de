// The OpenMPI transport behind world.cpp (mpi_communicator.cpp; a stub that
// explains what to install when Kiln was built without MPI).
#pragma once
#include <memory>

#include "kiln/distributed/communicator.h"

namespace kiln::distributed {

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);
void finalize_mpi();
[[noreturn]] void abort_mpi(int exit_code);

}  // namespace kiln::distributed
