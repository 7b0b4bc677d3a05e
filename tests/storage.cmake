# Storage backends and transfers (src/storage*.c, src/io/xfer.c).
# test_storage: the URL helpers, the settings, the local backend, S3 URL
# mapping and credentials (no network). test_xfer: transfers against the
# loopback servers (nginx http/https, the S3 server, the fault proxy).
zp_add_test(test_storage SOURCES tests/test_storage.c tests/testutil.c TIMEOUT 60 LABELS unit)
# test_s3_list: parsing ListObjectsV2 answers (keys, sizes, continuation
# tokens, encoding-type=url, S3 error documents, invalid answers).
zp_add_test(test_s3_list SOURCES tests/test_s3_list.c TIMEOUT 60 LABELS unit)
zp_add_test(test_xfer SOURCES tests/test_xfer.c tests/testutil.c TIMEOUT 120 LABELS tsan NET)
target_link_libraries(test_xfer PRIVATE PkgConfig::CURL)
# The fetcher's peer source (zp_storage_config.peer) with a fake source: no
# MPI, no server (storage is an address nothing listens on).
zp_add_test(test_peer_source SOURCES tests/test_peer_source.c tests/testutil.c TIMEOUT 60
            LABELS unit tsan)
# test_throttle: the per-host window (AIMD on 503 SlowDown / 429, shared by
# the node's processes through the cache folder), and two processes'
# transfers through the fault proxy's rate limit (rate within 1.1x of it,
# downloads at 0.9 of it).
zp_add_test(test_throttle SOURCES tests/test_throttle.c tests/testutil.c TIMEOUT 180 LABELS net NET)
target_link_libraries(test_throttle PRIVATE PkgConfig::CURL)
# alone: its rates are measured at the proxy, which the other tests share
set_tests_properties(test_throttle PROPERTIES RUN_SERIAL TRUE)
