# The memory budget (zephon/memory.h, src/output/budget.c; docs/pipeline.md
# "Memory budget"): its arithmetic, the start error that names what the
# settings need, equal batches with and without a budget, kept batches.
zp_add_test(test_budget SOURCES tests/test_budget.c tests/testutil.c TIMEOUT 180 LABELS unit)
# Peak RSS of `zephon run` under a budget, on jsonl.zst, HDF5 and Megatron
# data at 1 and 2 threads: at most the budget plus ZP_MEMORY_OVERHEAD_BYTES,
# and above it without the budget. Not under sanitizers (their shadow
# memory is not the pipeline's).
if(TARGET zephon_cli)
  add_executable(zp_peak_rss tests/memory/peak_rss.c)
  target_compile_options(zp_peak_rss PRIVATE ${ZP_WARN})
  add_test(NAME test_memory_budget
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/memory/test_memory_budget.sh
            $<TARGET_FILE:zephon_cli> $<TARGET_FILE:zp_peak_rss>)
  set_tests_properties(test_memory_budget PROPERTIES TIMEOUT 400 LABELS "cli;nosan")
endif()
