# `zephon preprocess` (docs/preprocess.md): the command end to end (outputs,
# batches equal to tokenize-on-the-fly, refusals, signals, bad records,
# flags), and under mpirun (per-shard outputs and one shared HDF5 file).
# zp_preprocess_encode_shard and _to: the same tokens, in memory or in pieces
# (label tsan: several teams one after the other from one thread)
zp_add_test(test_preprocess_encode SOURCES tests/test_preprocess_encode.c tests/testutil.c
            TIMEOUT 120 LABELS unit tsan)
add_test(NAME test_cli_preprocess
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_preprocess.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_preprocess PROPERTIES TIMEOUT 300 LABELS cli)
# shards read in several parts by several threads, also under TSan (label tsan)
add_test(NAME test_cli_preprocess_parts
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_preprocess_parts.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_preprocess_parts PROPERTIES TIMEOUT 300 LABELS "cli;tsan")
if(TARGET zephon_mpi AND MPIEXEC_EXECUTABLE)
  add_test(NAME test_mpi_preprocess
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/mpi/test_mpi_preprocess.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
  # under ASan: Open MPI's own leaks suppressed as for the other MPI tests
  set_tests_properties(test_mpi_preprocess PROPERTIES TIMEOUT 300 LABELS "cli;mpi"
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/mpi/lsan.supp:print_suppressions=0")
  # --shared: a rank's peak RSS does not grow with its shard (not under
  # sanitizers, whose shadow memory and quarantine make RSS meaningless)
  add_test(NAME test_mpi_preprocess_rss
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/mpi/test_mpi_preprocess.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE} rss)
  set_tests_properties(test_mpi_preprocess_rss PROPERTIES TIMEOUT 120 LABELS "cli;mpi;nosan")
endif()
