# The one-way layer order of src/, mpi/ and src/cli/ (docs/design.md,
# "Layers"): tools/check_layers.py reads every include and, from the
# objects' symbol tables, every call, and fails on an arrow that runs up or a
# circle. The three *_planted tests show that the check fails: a planted
# include up, a planted call up (an object built from
# tests/layers/planted_call.c read as a file of src/base/) and a planted
# circle between two files of one layer.
find_program(ZP_PYTHON3 NAMES python3)
if(ZP_PYTHON3 AND CMAKE_NM)
  set(_zp_layers ${ZP_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/../tools/check_layers.py
      --root ${CMAKE_CURRENT_LIST_DIR}/..)
  add_test(NAME test_layers COMMAND ${_zp_layers} --objects ${CMAKE_BINARY_DIR} --stats)
  set_tests_properties(test_layers PROPERTIES TIMEOUT 120 LABELS unit
    ENVIRONMENT "NM=${CMAKE_NM}")
  add_test(NAME test_layers_planted_include
    COMMAND ${_zp_layers} --plant-include src/base/util.c:api/pipeline_internal.h)
  set_tests_properties(test_layers_planted_include PROPERTIES TIMEOUT 60 LABELS unit
    PASS_REGULAR_EXPRESSION "src/base/util.c \\(base\\) includes src/api/pipeline_internal.h \\(api\\): runs up")
  add_library(zp_layers_probe OBJECT ${CMAKE_CURRENT_LIST_DIR}/layers/planted_call.c)
  target_include_directories(zp_layers_probe PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../include)
  add_test(NAME test_layers_planted_call
    COMMAND ${_zp_layers} --objects ${CMAKE_BINARY_DIR}
            "--object=src/base/planted_call.c=$<TARGET_OBJECTS:zp_layers_probe>")
  set_tests_properties(test_layers_planted_call PROPERTIES TIMEOUT 120 LABELS unit
    ENVIRONMENT "NM=${CMAKE_NM}"
    PASS_REGULAR_EXPRESSION "src/base/planted_call.c \\(base\\) calls src/api/pipeline.c \\(api\\): runs up")
  add_test(NAME test_layers_planted_circle
    COMMAND ${_zp_layers} --plant-include src/base/error.c:base/json.h
            --plant-include src/base/json.cpp:base/error.h)
  set_tests_properties(test_layers_planted_circle PROPERTIES TIMEOUT 60 LABELS unit
    PASS_REGULAR_EXPRESSION "circle of 2 files: src/base/error <-> src/base/json")
endif()
