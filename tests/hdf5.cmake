# HDF5 shards (src/formats/format_hdf5.c): the reader, its safety rules, the token
# writer, the sample writer and the HDF5 lock. The test writes its fixtures
# with the HDF5 C API itself (a parallel HDF5's hdf5.h includes <mpi.h>).
zp_add_test(test_hdf5 SOURCES tests/test_hdf5.c tests/testutil.c TIMEOUT 300 LABELS unit hdf5)
target_include_directories(test_hdf5 SYSTEM PRIVATE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
if(HDF5_IS_PARALLEL)
  find_package(MPI REQUIRED COMPONENTS C)
  target_include_directories(test_hdf5 SYSTEM PRIVATE ${MPI_C_INCLUDE_DIRS})
endif()
target_compile_definitions(test_hdf5 PRIVATE ${HDF5_C_DEFINITIONS})
target_link_libraries(test_hdf5 PRIVATE ${HDF5_C_LIBRARIES} Threads::Threads)
add_dependencies(test_hdf5 zephon_cli)
