# The zephon package's extensions over libzephon, for the two builds that
# make them: python/CMakeLists.txt (pip install ./python: the wheel) and
# tests/python.cmake (the build tree's package, for ctest).
#
#   zephon_py_core   zephon._core over the target zephon
#   zephon_py_mpi    zephon._mpi over zephon_mpi (when that target exists)
#
# Needs find_package(Python3 COMPONENTS Interpreter Development.Module) and
# the targets zephon (and zephon_mpi) defined before.
set(ZEPHON_PY_DIR ${CMAKE_CURRENT_LIST_DIR}/..)
set(ZEPHON_PY_CORE_SOURCES _core.c _util.c _dataset.c _wait.c _runner.c _pipeline.c _batch.c)
list(TRANSFORM ZEPHON_PY_CORE_SOURCES PREPEND ${ZEPHON_PY_DIR}/zephon/)
# the files of the package besides the extensions
set(ZEPHON_PY_FILES __init__.py mpi.py torch.py _core.pyi _mpi.pyi py.typed)
list(TRANSFORM ZEPHON_PY_FILES PREPEND ${ZEPHON_PY_DIR}/zephon/)

set(_zp_py_warn -Wall -Wextra -Wno-missing-field-initializers -Wno-cast-function-type)
if(ZEPHON_WERROR)
  list(APPEND _zp_py_warn -Werror)
endif()

function(zp_py_extension target name)
  Python3_add_library(${target} MODULE WITH_SOABI ${ARGN})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${name} C_STANDARD 11
    C_EXTENSIONS ON C_VISIBILITY_PRESET hidden)  # PyInit_ is exported by PyMODINIT_FUNC
  target_compile_options(${target} PRIVATE ${_zp_py_warn})
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE)
endfunction()

zp_py_extension(zephon_py_core _core ${ZEPHON_PY_CORE_SOURCES})
target_link_libraries(zephon_py_core PRIVATE zephon)
if(TARGET zephon_mpi)
  zp_py_extension(zephon_py_mpi _mpi ${ZEPHON_PY_DIR}/zephon/_mpi.c)
  target_link_libraries(zephon_py_mpi PRIVATE zephon_mpi zephon MPI::MPI_C)
endif()
