# libzephon_mpi: the MPI layer (communicator-aware WorkSource, startup
# agreement, lock-step delivery, metrics reduction, straggler analysis and
# the cluster report). Included by the top-level CMakeLists.txt when
# ZEPHON_WITH_MPI is ON (MPI::MPI_C found there).
set(_zp_mpi_dir ${CMAKE_CURRENT_LIST_DIR})
# The layer's objects, compiled once: into the shared (or static) library,
# and into zephon_mpi_internal, the static library that the tests and
# benchmarks reaching the layer's internals (mpi_internal.h) link, so that
# they do not depend on what the shared library exports.
add_library(zephon_mpi_objs OBJECT
  ${_zp_mpi_dir}/mpi_util.c
  ${_zp_mpi_dir}/mpi_comm.c
  ${_zp_mpi_dir}/mpi_agree.c
  ${_zp_mpi_dir}/mpi_report.c
  ${_zp_mpi_dir}/mpi_render.c)
set_target_properties(zephon_mpi_objs PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(zephon_mpi_objs PRIVATE ${ZP_WARN})
target_compile_definitions(zephon_mpi_objs PRIVATE _GNU_SOURCE)
target_include_directories(zephon_mpi_objs PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include ${_zp_mpi_dir})
target_link_libraries(zephon_mpi_objs PRIVATE zephon MPI::MPI_C PkgConfig::JANSSON)
add_library(zephon_mpi $<TARGET_OBJECTS:zephon_mpi_objs>)
add_library(zephon_mpi_internal STATIC $<TARGET_OBJECTS:zephon_mpi_objs>)
target_include_directories(zephon_mpi_internal PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include ${_zp_mpi_dir})
target_link_libraries(zephon_mpi_internal PUBLIC zephon MPI::MPI_C PkgConfig::JANSSON m)
add_library(zephon::mpi ALIAS zephon_mpi)
target_include_directories(zephon_mpi
  PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
         $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(zephon_mpi
  PUBLIC zephon MPI::MPI_C
  PRIVATE PkgConfig::JANSSON m)
# exported as zephon::mpi (the installed package config must find_dependency(MPI))
set_target_properties(zephon_mpi PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION 0
  EXPORT_NAME mpi)
install(TARGETS zephon_mpi EXPORT zephonTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# bench/mpi: the cost of one report (gather + analysis) at 2..16 ranks.
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/bench/mpi/bench_report.c)
  add_executable(bench_mpi_report ${CMAKE_CURRENT_SOURCE_DIR}/bench/mpi/bench_report.c
    ${CMAKE_CURRENT_SOURCE_DIR}/bench/mpi/report_sim.c)
  target_compile_options(bench_mpi_report PRIVATE ${ZP_WARN})
  target_compile_definitions(bench_mpi_report PRIVATE _GNU_SOURCE)
  # --analyse N simulates the root's analysis of N ranks' records (mpi_internal.h)
  target_link_libraries(bench_mpi_report PRIVATE zephon_mpi_internal m)
  target_include_directories(bench_mpi_report PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/bench/mpi)
endif()

# slurm/train_example.c: the training loop slurm/zephon-with-training.sbatch runs.
add_executable(example_mpi_train ${CMAKE_CURRENT_SOURCE_DIR}/slurm/train_example.c)
target_compile_options(example_mpi_train PRIVATE ${ZP_WARN})
target_link_libraries(example_mpi_train PRIVATE zephon_mpi)
