# MPI tests (label "mpi"): cmocka programs run under mpirun with 1..4 ranks
# (oversubscribed on small machines), command-line tests of `zephon run`
# under mpirun, and the real single-node Slurm test (label "slurm").
# Every test has a TIMEOUT: a rank that dies before a collective would
# otherwise leave the others waiting.
set(_zp_mpi_tests ${CMAKE_CURRENT_LIST_DIR})
set(ZP_MPI_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
  # oversubscribed ranks yield their core while waiting (no busy polling)
  OMPI_MCA_mpi_yield_when_idle=1
  # Open MPI keeps allocations until exit: under ASan they are suppressed by
  # library name (lsan.supp), which needs full stacks (slow unwinder)
  ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0
  LSAN_OPTIONS=suppressions=${_zp_mpi_tests}/lsan.supp:print_suppressions=0)
# The slow unwinder runs on every allocation of a rank: it made the MPI
# scripts 6 to 12 times slower under ASan than in the release build, most
# of the sanitizer step. Leaks under mpirun are checked by the MPI
# programs (zp_add_mpi_test), test_mpi_report, test_mpi_cli (every report
# format, a slow rank, lock-step packing), test_mpi_peer (the peer thread
# and its transfers) and test_mpi_preprocess; the other scripts run their
# ranks under ASan and UBSan without the leak check (ZP_MPI_ENV_NOLEAK),
# their code paths outside MPI being leak-checked by the tests of one
# process (test_cli_*, test_resume, test_mixture, ...).
set(ZP_MPI_ENV_NOLEAK ${ZP_MPI_ENV})
list(FILTER ZP_MPI_ENV_NOLEAK EXCLUDE REGEX "^(A|L)SAN_OPTIONS=")
list(APPEND ZP_MPI_ENV_NOLEAK ASAN_OPTIONS=detect_leaks=0)
set(ZP_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)

# zp_add_mpi_test(NAME SOURCES... NP n... TIMEOUT s)
function(zp_add_mpi_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;NP" ${ARGN})
  add_executable(${name} ${T_SOURCES} ${_zp_mpi_tests}/mpitest.c
                 ${CMAKE_CURRENT_SOURCE_DIR}/tests/testutil.c)
  target_compile_options(${name} PRIVATE ${ZP_WARN})
  target_compile_definitions(${name} PRIVATE _GNU_SOURCE)
  target_include_directories(${name} PRIVATE ${_zp_mpi_tests} ${CMAKE_CURRENT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE zephon_mpi PkgConfig::CMOCKA PkgConfig::ZSTD
                        PkgConfig::JANSSON m)
  foreach(np ${T_NP})
    add_test(NAME ${name}_np${np}
      COMMAND ${ZP_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:${name}>)
    set_tests_properties(${name}_np${np} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS mpi
      ENVIRONMENT "${ZP_MPI_ENV}")
  endforeach()
endfunction()

zp_add_mpi_test(test_mpi_basic SOURCES ${_zp_mpi_tests}/test_mpi_basic.c NP 1 2 3 4 TIMEOUT 60)
zp_add_mpi_test(test_mpi_agree SOURCES ${_zp_mpi_tests}/test_mpi_agree.c NP 1 2 3 4 TIMEOUT 60)
zp_add_mpi_test(test_mpi_straggler SOURCES ${_zp_mpi_tests}/test_mpi_straggler.c NP 1 2 3 4 TIMEOUT 90)
# Cross-rank attention-cost balance (zp_mpi_balance): rows once per step,
# the figures, determinism, resume at a step boundary, the refusals.
zp_add_mpi_test(test_mpi_balance SOURCES ${_zp_mpi_tests}/test_mpi_balance.c NP 1 2 4 TIMEOUT 120)
# The straggler tests judge real fetch times (one rank 25 ms slower): run
# alone, so that another test's ranks on the same 2 cores do not make every
# rank slow at once.
foreach(np 1 2 3 4)
  set_tests_properties(test_mpi_straggler_np${np} PROPERTIES RUN_SERIAL TRUE)
endforeach()

# `zephon run` under mpirun: exactly once, the report files, a slow rank
# named, a rank given another manifest, token packing in lock-step.
add_test(NAME test_mpi_cli
  COMMAND bash ${_zp_mpi_tests}/test_mpi_cli.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_mpi_cli PROPERTIES TIMEOUT 300 LABELS "mpi;cli"
  ENVIRONMENT "${ZP_MPI_ENV}")

# Elastic resume: 4 ranks save the job state of a 3-part mixture part-way
# through an epoch, 3 ranks resume it; the epoch's draws over both runs are
# each delivered exactly once (record mode and concat packing).
add_test(NAME test_mpi_elastic
  COMMAND bash ${_zp_mpi_tests}/test_mpi_elastic.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_mpi_elastic PROPERTIES TIMEOUT 600 LABELS "mpi;cli"
  ENVIRONMENT "${ZP_MPI_ENV_NOLEAK}")

# Best-fit packing under mpirun: elastic resume (4 ranks -> 3) from states
# saved inside windows, exact resume on 4 (docs/packing.md).
add_test(NAME test_mpi_bestfit
  COMMAND bash ${_zp_mpi_tests}/test_mpi_bestfit.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_mpi_bestfit PROPERTIES TIMEOUT 600 LABELS "mpi;cli"
  ENVIRONMENT "${ZP_MPI_ENV_NOLEAK}")

# Startup at job scale: rank 0 alone reads the manifest and stats the
# shards; the other ranks build the dataset from its broadcast without a
# stat() per shard (file system calls counted by tests/mpi/fscount.c, a
# preload library: not under ASan, label nosan).
if(TARGET bench_startup AND TARGET zp_fscount)
  add_test(NAME test_mpi_startup
    COMMAND bash ${_zp_mpi_tests}/test_mpi_startup.sh $<TARGET_FILE:bench_startup>
            $<TARGET_FILE:zp_fscount> ${MPIEXEC_EXECUTABLE})
  set_tests_properties(test_mpi_startup PROPERTIES TIMEOUT 300 LABELS "mpi;nosan"
    ENVIRONMENT "${ZP_MPI_ENV}")
endif()

# `zephon run --balance-ranks K` under mpirun: each step's samples over the
# ranks as without, the figures in the summary and the report, determinism,
# resume at a step boundary, the refusals (docs/mpi.md).
add_test(NAME test_mpi_balance_cli
  COMMAND bash ${_zp_mpi_tests}/test_mpi_balance_cli.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_mpi_balance_cli PROPERTIES TIMEOUT 300 LABELS "mpi;cli"
  ENVIRONMENT "${ZP_MPI_ENV_NOLEAK}")

# Mixture weight schedules under mpirun: elastic resume (4 ranks -> 3) across
# the change points, each rank's exact stream (4 -> 4), and a resume with
# another schedule (no draw repeated or lost; docs/mixtures.md).
add_test(NAME test_mpi_schedule
  COMMAND bash ${_zp_mpi_tests}/test_mpi_schedule.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_mpi_schedule PROPERTIES TIMEOUT 600 LABELS "mpi;cli"
  ENVIRONMENT "${ZP_MPI_ENV_NOLEAK}")

# A real single-node Slurm (munged, slurmctld, slurmd started and stopped by
# the script) running slurm/zephon-smoke.sbatch. Needs root and the
# slurm-wlm and munge packages (tools/deps.sh --slurm); not under sanitizers.
set(_zp_slurm_py "")
if(TARGET zephon_python)
  set(_zp_slurm_py ${_zp_pyout}/lib)
endif()
add_test(NAME test_mpi_slurm
  COMMAND bash ${_zp_mpi_tests}/slurm_test.sh $<TARGET_FILE:zephon_cli> $<TARGET_FILE:example_mpi_train>
          ${_zp_slurm_py})
set_tests_properties(test_mpi_slurm PROPERTIES TIMEOUT 180 LABELS "mpi;slurm;nosan"
  ENVIRONMENT "${ZP_MPI_ENV}" RUN_SERIAL TRUE)

# The report for people, on reports simulated in one process
# (bench/mpi/report_sim.c): human units, the settings line, the heat map's
# warm-up, the size bound of docs/report.md at 1,000 ranks and 100,000
# shards. A plain program (no mpirun).
add_executable(test_mpi_report ${_zp_mpi_tests}/test_mpi_report.c
               ${CMAKE_CURRENT_SOURCE_DIR}/bench/mpi/report_sim.c)
target_compile_options(test_mpi_report PRIVATE ${ZP_WARN})
target_compile_definitions(test_mpi_report PRIVATE _GNU_SOURCE)
target_include_directories(test_mpi_report PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/bench/mpi)
# the layer's internals (mpi_internal.h) from the static library, not the .so
target_link_libraries(test_mpi_report PRIVATE zephon_mpi_static PkgConfig::CMOCKA m)
add_test(NAME test_mpi_report COMMAND test_mpi_report)
set_tests_properties(test_mpi_report PROPERTIES TIMEOUT 180 LABELS mpi
  ENVIRONMENT "${ZP_MPI_ENV}")

# The HTML page in a real browser (Debian's headless Chromium, installed by
# tools/deps.sh): at 16, 1,000 and 10,000 simulated ranks and for a real
# run it loads without errors, its charts are drawn and its height stays
# within a few screens. Skipped (exit 77, saying why) only when chromium is
# not installed.
add_test(NAME test_mpi_report_browser
  COMMAND bash ${_zp_mpi_tests}/test_report_browser.sh $<TARGET_FILE:test_mpi_report>
          $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_mpi_report_browser PROPERTIES TIMEOUT 180 LABELS "mpi;browser"
  SKIP_RETURN_CODE 77 ENVIRONMENT "${ZP_MPI_ENV_NOLEAK}")

# One HDF5 file shared by the ranks (MPI-IO and serial drivers): exactly
# once at 1..4 ranks, the same batches with both drivers, the report's
# on-demand reads.
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/src/formats/format_hdf5.c)
  add_test(NAME test_mpi_hdf5
    COMMAND bash ${_zp_mpi_tests}/test_mpi_hdf5.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
  set_tests_properties(test_mpi_hdf5 PROPERTIES TIMEOUT 600 LABELS "mpi;cli"
    ENVIRONMENT "${ZP_MPI_ENV_NOLEAK}")
endif()

# The coverage certificate under mpirun (docs/report.md): every sample once
# per epoch (records, a mixture, padding), a sample dropped on one rank
# named, certified across an elastic resume (4 ranks -> 3), the token
# packing's ends reported.
add_test(NAME test_mpi_coverage
  COMMAND bash ${_zp_mpi_tests}/test_mpi_coverage.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_mpi_coverage PROPERTIES TIMEOUT 300 LABELS "mpi;cli"
  ENVIRONMENT "${ZP_MPI_ENV_NOLEAK}")
# Threads under a launcher: the default threads per rank from the binding
# and the node's ranks sharing it, --threads / OMP_NUM_THREADS winning, the
# report's oversubscription warning (docs/mpi.md).
add_test(NAME test_mpi_threads
  COMMAND bash ${_zp_mpi_tests}/test_mpi_threads.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_mpi_threads PROPERTIES TIMEOUT 300 LABELS "mpi;cli"
  ENVIRONMENT "${ZP_MPI_ENV_NOLEAK}")

# Autotune in the cluster report: each rank's automatic settings.
add_test(NAME test_mpi_autotune
  COMMAND bash ${_zp_mpi_tests}/test_mpi_autotune.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_mpi_autotune PROPERTIES TIMEOUT 300 LABELS "mpi;cli"
  ENVIRONMENT "${ZP_MPI_ENV_NOLEAK}")

# The stall watchdog across ranks: a stalled server holds one rank's shard;
# the root learns of it while it lasts and the report names rank, operator
# and shard (docs/mpi.md). Needs the loopback servers (fixture net).
add_test(NAME test_mpi_watchdog
  COMMAND bash ${_zp_mpi_tests}/test_mpi_watchdog.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_mpi_watchdog PROPERTIES TIMEOUT 300 LABELS "mpi;cli;net"
  FIXTURES_REQUIRED net ENVIRONMENT "${ZP_MPI_ENV_NOLEAK};ZT_NETENV=${ZP_NETENV}")

# Shards shared between nodes over MPI, on 4 and 8 emulated nodes (8 ranks,
# oversubscribed), downloads counted in the suite's nginx log (fixture net)
if(ZP_NETENV)
  add_test(NAME test_mpi_peer
    COMMAND bash ${_zp_mpi_tests}/test_mpi_peer.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
  set_tests_properties(test_mpi_peer PROPERTIES TIMEOUT 600 LABELS "mpi;cli;net" RUN_SERIAL TRUE
    FIXTURES_REQUIRED net ENVIRONMENT "${ZP_MPI_ENV};ZT_NETENV=${ZP_NETENV}")
endif()
