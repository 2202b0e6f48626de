// libgomp's default makes idle OpenMP threads spin for a while after each
// parallel region. On a busy or small machine (CI's 2 cores, a data-loading
// thread beside the workers) the spinning steals the cores the work needs:
// measured here, a training step ran 25x slower under load. Passive waiting
// costs a few microseconds per region instead. libgomp reads the policy once
// when it is loaded, before main() runs, so the only way to change the
// default is to set the variable and re-execute the program.
#pragma once

namespace kiln {

// If OMP_WAIT_POLICY is unset, sets it to PASSIVE and re-executes the program
// with the same arguments. A user's own OMP_WAIT_POLICY is respected. Call
// first thing in main().
void use_passive_openmp_waiting(char** argv);

}  // namespace kiln
