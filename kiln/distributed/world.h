// The job this process belongs to. A process started by mpirun (OpenMPI's
// OMPI_COMM_WORLD_* variables, or PMI_* from Slurm's srun) joins the MPI
// world. One started torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set, as torchrun or a shell loop does) meets the others at
// MASTER_ADDR:MASTER_PORT and joins a Gloo world. Any other process is a
// world of one and runs exactly as without this layer. Only rank 0 prints
// and writes shared files.
#pragma once
#include <chrono>
#include <functional>

#include "kiln/distributed/communicator.h"

namespace kiln::distributed {

// Call first thing in main (before threads start). Safe to call when no
// launcher is present. An MPI launch joins here; a torchrun-style one joins
// on the first call of world(), so the command line can set its timeout.
void init_from_environment(int* argc, char*** argv);
// How long a torchrun-style rendezvous waits for every rank (default 300 s);
// set before the first world().
void set_rendezvous_timeout(std::chrono::seconds timeout);
// Ends the MPI world (no-op for other worlds). Called at exit by init.
void finalize();
// Ends every rank of the job after a fatal error on this one.
[[noreturn]] void abort_job(int exit_code);

Communicator& world();
inline int rank() { return world().rank(); }
inline int world_size() { return world().world_size(); }
inline bool is_rank0() { return rank() == 0; }
// This process's index among the job's processes on its node (LOCAL_RANK,
// else OpenMPI's local rank, else 0), and how many there are: which GPU to
// take.
int local_rank();
int local_world_size();
// The ranks of the world this process has joined so far, 1 before a
// torchrun-style join: error paths ask this, as world() would join.
int joined_world_size();
// "rank 2 of 4: " in a multi-rank job, "" otherwise (or not joined yet):
// prefixes errors.
std::string rank_prefix();

// Runs `f` on rank 0 first, then on the others (after a barrier): for work
// that fills a shared cache, such as training the tokenizer.
void rank0_first(const std::function<void()>& f);

}  // namespace kiln::distributed
