# Test registry: each part of the library keeps its tests in its own file.
foreach(part dataset worksource engine cli)
  if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/${part}.cmake)
    include(${CMAKE_CURRENT_LIST_DIR}/${part}.cmake)
  endif()
endforeach()
include(${CMAKE_CURRENT_LIST_DIR}/tokenize_cli.cmake)
