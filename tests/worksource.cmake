# WorkSource unit tests. They build src/plan/worksource.c with a fake dataset
# (tests/fake_dataset.c: shards given as record counts) instead of linking
# libzephon, so they need no files and no other part of the library.
# `test_worksource --bench` measures the lookup cost (not run by ctest).
# test_ws_mixture: the WorkSource over a mixture (parts, passes, plans).
foreach(t test_worksource test_ws_mixture test_ws_schedule)
  zp_add_source_test(${t} SOURCES tests/${t}.c tests/fake_dataset.c src/plan/worksource.c
                     src/plan/plan.c src/plan/mixture.c src/plan/schedule.c src/base/util.c src/base/error.c src/base/status.c
                     src/base/coverage.c)
endforeach()
# test_next_use: the disk cache's next-use order (src/engine/next_use.c) over
# the same fake dataset.
zp_add_source_test(test_next_use SOURCES tests/test_next_use.c tests/fake_dataset.c
                   src/engine/next_use.c src/plan/worksource.c src/plan/plan.c src/plan/mixture.c
                   src/plan/schedule.c src/base/util.c src/base/error.c src/base/status.c
                   src/base/coverage.c)
