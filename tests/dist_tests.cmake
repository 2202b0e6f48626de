# Multi-process tests: mpirun on this machine, oversubscribed (CI has 2
# cores). Root needs OpenMPI's explicit consent, given through the
# environment so the same command works for any user.
if(NOT MPI_C_FOUND)
  message(STATUS "MPI not found: the distributed tests are not built")
  return()
endif()
find_program(KILN_MPIRUN NAMES mpirun mpiexec)
add_executable(kiln_dist_check tests/dist/collectives_check.cpp)
# bench/dist/scaling.sh: Kiln's all-reduce against raw MPI.
add_executable(bench_allreduce bench/dist/allreduce_bench.cpp)
target_link_libraries(bench_allreduce PRIVATE kiln)
target_link_libraries(kiln_dist_check PRIVATE kiln)
set(KILN_MPI_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
    OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none)
foreach(np 2 4)
  add_test(NAME dist.collectives_np${np} COMMAND ${KILN_MPIRUN} -np ${np} $<TARGET_FILE:kiln_dist_check>)
  set_tests_properties(dist.collectives_np${np} PROPERTIES LABELS "cpu;dist" TIMEOUT 120
                       ENVIRONMENT "${KILN_MPI_ENV}")
endforeach()
