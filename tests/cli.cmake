# Command-line tests: `zephon run` digests, ids and error paths; its
# options (ranges, --map strip); outputs (write errors) and signals;
# mixtures and checkpoints; the generator module in-process.
add_test(NAME test_cli_run
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_run.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_run PROPERTIES TIMEOUT 300 LABELS cli)
add_test(NAME test_cli_options
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_options.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_options PROPERTIES TIMEOUT 120 LABELS cli)
add_test(NAME test_cli_outputs
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_outputs.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_outputs PROPERTIES TIMEOUT 180 LABELS cli)
# Mixtures (--data SPEC@WEIGHT, --mixture FILE) and checkpoints (--save-state,
# --resume, --skip-batches) from the command line.
add_test(NAME test_cli_mixture
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_mixture_cli.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_mixture PROPERTIES TIMEOUT 180 LABELS cli)
add_test(NAME test_cli_state
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_state_cli.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_state PROPERTIES TIMEOUT 240 LABELS cli)
zp_add_test(test_gen SOURCES tests/cli/test_gen.c tests/testutil.c TIMEOUT 60 LABELS unit cli)
# `zephon tokenize`'s id formatter (src/cli/id_text.h), every id below 2^21.
zp_add_test(test_id_text SOURCES tests/cli/test_id_text.c TIMEOUT 60 LABELS unit cli)
if(TARGET zephon_mpi)
  if(MPIEXEC_EXECUTABLE)
    add_test(NAME test_cli_signals_mpi
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_signals_mpi.sh $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
    # Times how fast every rank stops: run alone, not beside another MPI
    # test, and not under ASan, whose leak check at exit (full stacks, for
    # Open MPI's suppressions) alone takes seconds; the signal path itself
    # runs under ASan in test_cli_outputs.
    set_tests_properties(test_cli_signals_mpi PROPERTIES TIMEOUT 180 LABELS "cli;mpi;nosan"
      RUN_SERIAL TRUE)
  endif()
endif()
# Mixture weight schedules (a mixture file's "schedule"; docs/mixtures.md).
add_test(NAME test_cli_schedule
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_schedule_cli.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_schedule PROPERTIES TIMEOUT 180 LABELS cli)
# Shards read by segments: formats, exactly once, digests, convert, RSS.
add_test(NAME test_cli_segments
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_segments_cli.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_segments PROPERTIES TIMEOUT 300 LABELS cli)
add_test(NAME test_cli_segments_rss
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_segments_cli.sh $<TARGET_FILE:zephon_cli> rss)
set_tests_properties(test_cli_segments_rss PROPERTIES TIMEOUT 120 LABELS "cli;nosan")
# `zephon tune` (docs/cli.md; the settings it tunes: docs/pipeline.md, "Autotune").
add_test(NAME test_cli_tune
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_tune.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_tune PROPERTIES TIMEOUT 240 LABELS cli)
# A tokenize field of token ids (pre-tokenized documents in JSON records,
# as Parquet's list<int> columns arrive) and --emit-records.
add_test(NAME test_cli_token_ids
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_token_ids.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_token_ids PROPERTIES TIMEOUT 180 LABELS cli)
# gzip shards (.jsonl.gz, .json.gz; docs/formats.md "gzip"): the same
# samples as .jsonl/.jsonl.zst, members, segments, resume, named errors.
add_test(NAME test_cli_gzip
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_gzip.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_gzip PROPERTIES TIMEOUT 300 LABELS cli)
# Parquet: a shuffled epoch reads each row group once (pyarrow fixtures).
add_test(NAME test_cli_parquet_locality
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_parquet_locality.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_parquet_locality PROPERTIES TIMEOUT 300 LABELS "cli;parquet;pqref")
# Parquet files the project did not write (issue 25, point 5): a corpus by
# pyarrow (each codec, page version and encoding forced), datasets, DuckDB and
# hyparquet-writer, read back by DuckDB and hyparquet and compared field by
# field with Zephon's records; exactly once over ranks, resume, tokenizing
# against .jsonl.zst, token-id columns, index, damaged files
# (tests/cli/test_parquet.sh). Label pqref: it installs the independent
# writers and readers (tools/pqref.sh, build/pqref, shared by the build
# folders) on its first run. With MPI it also runs 3 ranks under mpirun.
set(_zp_pq_mpi "")
if(TARGET zephon_mpi AND MPIEXEC_EXECUTABLE)
  set(_zp_pq_mpi ${MPIEXEC_EXECUTABLE})
endif()
add_test(NAME test_cli_parquet
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_parquet.sh $<TARGET_FILE:zephon_cli> ${_zp_pq_mpi})
set_tests_properties(test_cli_parquet PROPERTIES TIMEOUT 900 LABELS "cli;parquet;pqref")
# The same Parquet files over http, https and S3 (the loopback servers,
# fixture net): records, shuffled sample ids and index counts.
add_test(NAME test_remote_parquet
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/remote/test_remote_parquet.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_remote_parquet PROPERTIES TIMEOUT 300 LABELS "net;remote;parquet;pqref"
  FIXTURES_REQUIRED net ENVIRONMENT "ZT_NETENV=${ZP_NETENV}")
