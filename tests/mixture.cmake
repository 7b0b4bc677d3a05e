# Mixture unit tests (src/plan/mixture.c: the draw sequence of a weighted
# mixture). Built from src/plan/mixture.c and the error mechanism only, without
# libzephon, so that they need no other part of the library.
zp_add_source_test(test_mixture SOURCES tests/test_mixture.c src/plan/mixture.c src/base/error.c
                   src/base/status.c)
set_tests_properties(test_mixture PROPERTIES TIMEOUT 120)
