# libzephon_mpi: the MPI layer (communicator-aware WorkSource, startup
# agreement, lock-step delivery, metrics reduction, straggler analysis and
# the cluster report). Included by the top-level CMakeLists.txt when
# ZEPHON_WITH_MPI is ON (MPI::MPI_C found there).
set(_zp_mpi_dir ${CMAKE_CURRENT_LIST_DIR})
add_library(zephon_mpi
  ${_zp_mpi_dir}/mpi_util.c
  ${_zp_mpi_dir}/mpi_coll.c
  ${_zp_mpi_dir}/mpi_comm.c
  ${_zp_mpi_dir}/mpi_step.c
  ${_zp_mpi_dir}/mpi_balance.c
  ${_zp_mpi_dir}/mpi_next.c
  ${_zp_mpi_dir}/mpi_agree.c
  ${_zp_mpi_dir}/mpi_state.c
  ${_zp_mpi_dir}/mpi_report.c
  ${_zp_mpi_dir}/mpi_render_common.c
  ${_zp_mpi_dir}/mpi_render_text.c
  ${_zp_mpi_dir}/mpi_render_data.c
  ${_zp_mpi_dir}/mpi_render_html.c
  ${_zp_mpi_dir}/mpi_render.c
  ${_zp_mpi_dir}/mpi_coverage.c
  ${_zp_mpi_dir}/mpi_watchdog.c
  ${_zp_mpi_dir}/mpi_peer.c)
add_library(zephon::mpi ALIAS zephon_mpi)
# HDF5 through MPI-IO (shared files) and `zephon preprocess` under mpirun
foreach(f mpi_h5.c mpi_preprocess.c)
  if(EXISTS ${_zp_mpi_dir}/${f})
    target_sources(zephon_mpi PRIVATE ${_zp_mpi_dir}/${f})
  endif()
endforeach()
# the report's accelerator utilisation and the HTML page's distributions
target_sources(zephon_mpi PRIVATE ${_zp_mpi_dir}/mpi_au.c ${_zp_mpi_dir}/mpi_render_html_dist.c)
target_include_directories(zephon_mpi SYSTEM PRIVATE ${ZP_HDF5_INCLUDE_DIRS})
target_compile_definitions(zephon_mpi PRIVATE ${HDF5_C_DEFINITIONS})
target_compile_options(zephon_mpi PRIVATE ${ZP_WARN})
target_compile_definitions(zephon_mpi PRIVATE _GNU_SOURCE)
target_include_directories(zephon_mpi
  PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
         $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE ${_zp_mpi_dir} ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(zephon_mpi
  PUBLIC zephon MPI::MPI_C
  PRIVATE PkgConfig::JANSSON ${HDF5_C_LIBRARIES} m)
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
  target_link_libraries(bench_mpi_report PRIVATE zephon_mpi_static m)
  # --analyse N simulates the root's analysis of N ranks' records (mpi_internal.h)
  target_include_directories(bench_mpi_report PRIVATE ${_zp_mpi_dir} ${CMAKE_CURRENT_SOURCE_DIR}/bench/mpi)
endif()

# bench/startup: time to every rank's first batch and bytes read per rank
# with a manifest of 100,000 shards (bench/startup/run.sh); tests/mpi/fscount.c,
# the preload library that counts a rank's stat() and open() calls on the
# shards and the manifest (the benchmark and test_mpi_startup).
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/bench/startup/bench_startup.c)
  add_executable(bench_startup ${CMAKE_CURRENT_SOURCE_DIR}/bench/startup/bench_startup.c)
  target_compile_options(bench_startup PRIVATE ${ZP_WARN})
  target_compile_definitions(bench_startup PRIVATE _GNU_SOURCE)
  target_link_libraries(bench_startup PRIVATE zephon_mpi)
endif()
# (tests/ is not in the Python sdist's copy of the sources)
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/tests/mpi/fscount.c)
  add_library(zp_fscount MODULE ${CMAKE_CURRENT_SOURCE_DIR}/tests/mpi/fscount.c)
  target_compile_options(zp_fscount PRIVATE ${ZP_WARN})
  target_link_libraries(zp_fscount PRIVATE ${CMAKE_DL_LIBS})
endif()

# slurm/train_example.c: the training loop slurm/zephon-with-training.sbatch runs.
add_executable(example_mpi_train ${CMAKE_CURRENT_SOURCE_DIR}/slurm/train_example.c)
target_compile_options(example_mpi_train PRIVATE ${ZP_WARN})
target_link_libraries(example_mpi_train PRIVATE zephon_mpi)
