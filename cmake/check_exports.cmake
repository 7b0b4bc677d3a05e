# cmake/check_exports.cmake - fails when a shared library exports anything
# but the public zp_ API (the ZP_API functions).
#
#   cmake -DNM=<nm> -DLIB=<lib.so> [-DEXPECT=<symbol>] -P check_exports.cmake
#
# Lists the defined dynamic symbols (nm -D --defined-only) and fails naming
# every one that does not start with zp_, and when EXPECT (a symbol the
# library must export) is missing, so that an empty or unreadable symbol
# table does not pass.
if(NOT NM OR NOT LIB)
  message(FATAL_ERROR "usage: cmake -DNM=nm -DLIB=lib.so [-DEXPECT=sym] -P check_exports.cmake")
endif()
execute_process(COMMAND ${NM} -D --defined-only ${LIB}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed (${rc}): ${err}")
endif()
string(REPLACE "\n" ";" lines "${out}")
set(bad)
set(n 0)
set(found 0)
foreach(line ${lines})
  if(line MATCHES "^[0-9a-fA-F]* *[A-Za-z] +([^ ]+)$")
    set(sym ${CMAKE_MATCH_1})
    math(EXPR n "${n} + 1")
    if(NOT sym MATCHES "^zp_")
      list(APPEND bad ${sym})
    endif()
    if(EXPECT AND sym STREQUAL EXPECT)
      set(found 1)
    endif()
  endif()
endforeach()
if(bad)
  list(LENGTH bad nbad)
  string(REPLACE ";" "\n  " list "${bad}")
  message(FATAL_ERROR "${LIB} exports ${nbad} symbol(s) outside the zp_ API:\n  ${list}")
endif()
if(EXPECT AND NOT found)
  message(FATAL_ERROR "${LIB} does not export ${EXPECT} (${n} symbols exported)")
endif()
message(STATUS "${LIB}: ${n} symbols exported, all zp_")
