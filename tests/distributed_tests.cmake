# Multi-process tests on this machine: under mpirun, oversubscribed (CI has
# 2 cores; root needs OpenMPI's explicit consent, given through the
# environment so the same command works for any user), and launched
# torchrun-style over Gloo (tests/distributed/launch_local.sh).
if(NOT MPI_C_FOUND AND NOT KILN_HAVE_GLOO)
  message(STATUS "neither MPI nor Gloo found: the distributed tests are not built")
  return()
endif()
add_executable(kiln_dist_check tests/distributed/collectives_check.cpp)
target_link_libraries(kiln_dist_check PRIVATE kiln)
if(MPI_C_FOUND)
  find_program(KILN_MPIRUN NAMES mpirun mpiexec)
  # bench/distributed/scaling.sh: Kiln's all-reduce against raw MPI.
  add_executable(bench_allreduce bench/distributed/allreduce_bench.cpp)
  target_link_libraries(bench_allreduce PRIVATE kiln MPI::MPI_C)
  set(KILN_MPI_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
      OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none)
  foreach(np 2 4)
    add_test(NAME dist.collectives_np${np} COMMAND ${KILN_MPIRUN} -np ${np} $<TARGET_FILE:kiln_dist_check>)
    set_tests_properties(dist.collectives_np${np} PROPERTIES LABELS "cpu;dist" TIMEOUT 120
                         ENVIRONMENT "${KILN_MPI_ENV}")
  endforeach()
endif()
if(KILN_HAVE_GLOO)
  foreach(np 2 4)
    add_test(NAME dist.collectives_gloo_np${np}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/distributed/launch_local.sh ${np} $<TARGET_FILE:kiln_dist_check>)
    # The check prints the transport, so a run that fell back to another
    # world cannot pass.
    set_tests_properties(dist.collectives_gloo_np${np} PROPERTIES LABELS "cpu;dist" TIMEOUT 120
                         PASS_REGULAR_EXPRESSION "all checks passed on ${np} ranks over gloo"
                         FAIL_REGULAR_EXPRESSION "FAILED|exited with status")
  endforeach()
endif()
