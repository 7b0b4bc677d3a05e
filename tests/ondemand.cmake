# Shards read on demand (HDF5, Megatron .bin/.idx) through the whole
# pipeline: pre-tokenized documents give the batches of on-the-fly
# tokenization; fixed-shape fields are batched.
zp_add_test(test_ondemand SOURCES tests/test_ondemand.c tests/testutil.c TIMEOUT 120 LABELS unit engine)
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/../src/formats/format_hdf5.c)
  target_compile_definitions(test_ondemand PRIVATE ZP_HAVE_FORMAT_HDF5=1)
endif()
