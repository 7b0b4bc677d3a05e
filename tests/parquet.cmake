# The Parquet reader (src/formats/parquet.h, issue 25 point 2). The fixtures
# are written at test time by pyarrow from tools/pqref.sh (installed from PyPI
# on first use into $ZP_PQREF or the source tree's build/pqref, shared by every
# build folder: label pqref, like tools/tokref.sh's users):
# every codec, page version v1/v2, dictionary on and off, each forced
# encoding, and files the reader must refuse (tests/parquet/make_fixtures.py).
# test_parquet compares every row field by field with pyarrow's own reading,
# and checks ranges, the footer from a tail, refused, truncated and
# bit-flipped files.
set(ZP_PQ_FIXTURES ${CMAKE_BINARY_DIR}/parquet_fixtures)
add_test(NAME parquet_fixtures
  COMMAND bash -c "set -e; d=$(${CMAKE_CURRENT_LIST_DIR}/../tools/pqref.sh | tail -n 1); rm -rf '${ZP_PQ_FIXTURES}'; \"$d/venv/bin/python\" ${CMAKE_CURRENT_LIST_DIR}/parquet/make_fixtures.py '${ZP_PQ_FIXTURES}'")
set_tests_properties(parquet_fixtures PROPERTIES TIMEOUT 900 FIXTURES_SETUP parquet_fixtures
  LABELS "unit;parquet;pqref")
zp_add_test(test_parquet SOURCES tests/test_parquet.c tests/testutil.c TIMEOUT 600
  LABELS unit parquet pqref)
target_compile_definitions(test_parquet PRIVATE ZP_TEST_SRC="${CMAKE_CURRENT_LIST_DIR}")
set_tests_properties(test_parquet PROPERTIES FIXTURES_REQUIRED parquet_fixtures
  ENVIRONMENT "ZP_PQ_FIXTURES=${ZP_PQ_FIXTURES}")
