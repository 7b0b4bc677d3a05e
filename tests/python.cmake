# The Python package (python/, docs/python.md): built against this build's
# libzephon into ${CMAKE_BINARY_DIR}/python, then its tests run there.
# Not in sanitizer builds (the interpreter is not instrumented; the C paths
# the binding uses, kept batches and batch maps, run under ASan and TSan in
# test_pipeline).
if(NOT ZEPHON_SANITIZE)
  if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    # Debian's python3 has apt's numpy, torch, mpi4py; another python3 may
    # come first on PATH
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module)
endif()
if(NOT ZEPHON_SANITIZE AND Python3_FOUND AND TARGET zephon_cli)
  set(_zp_py ${CMAKE_CURRENT_LIST_DIR}/../python)
  set(_zp_pyout ${CMAKE_BINARY_DIR}/python)
  # the extensions as pip builds them (python/cmake/extensions.cmake), here
  # over this build's libzephon (found through the build tree's RPATH), and
  # the package's other files beside them in ${_zp_pyout}/lib/zephon
  include(${_zp_py}/cmake/extensions.cmake)
  set(_zp_py_targets zephon_py_core)
  if(TARGET zephon_py_mpi)
    list(APPEND _zp_py_targets zephon_py_mpi)
  endif()
  set_target_properties(${_zp_py_targets} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY ${_zp_pyout}/lib/zephon)
  set(_zp_py_copies)
  foreach(f ${ZEPHON_PY_FILES})
    get_filename_component(n ${f} NAME)
    add_custom_command(OUTPUT ${_zp_pyout}/lib/zephon/${n}
      COMMAND ${CMAKE_COMMAND} -E copy_if_different ${f} ${_zp_pyout}/lib/zephon/${n}
      DEPENDS ${f})
    list(APPEND _zp_py_copies ${_zp_pyout}/lib/zephon/${n})
  endforeach()
  add_custom_target(zephon_python ALL DEPENDS ${_zp_py_targets} ${_zp_py_copies})
  set(_zp_pyenv "ZEPHON_PYTHONPATH=${_zp_pyout}/lib;ZEPHON_BIN=$<TARGET_FILE:zephon_cli>")
  foreach(t api runner examples interrupt tokenizer_names masking schedule bestfit balance
            watchdog budget autotune)
    add_test(NAME test_python_${t}
      COMMAND ${Python3_EXECUTABLE} -m unittest -v test_${t}
      WORKING_DIRECTORY ${_zp_py}/tests)
    set_tests_properties(test_python_${t} PROPERTIES TIMEOUT 300 LABELS "python;nosan"
      ENVIRONMENT "${_zp_pyenv}")
  endforeach()
  # The cleanup tests look at all of /dev/shm: alone, so that another test's
  # MPI shared-memory segments (Open MPI's vader_segment.*) are not counted.
  set_tests_properties(test_python_runner PROPERTIES RUN_SERIAL TRUE)
  if(TARGET zephon_mpi AND MPIEXEC_EXECUTABLE)
    add_test(NAME test_python_mpi
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/mpi/test_python_mpi.sh $<TARGET_FILE:zephon_cli>
              ${MPIEXEC_EXECUTABLE} ${Python3_EXECUTABLE} ${_zp_pyout}/lib)
    set_tests_properties(test_python_mpi PROPERTIES TIMEOUT 300 LABELS "python;mpi;nosan")
  endif()
endif()
