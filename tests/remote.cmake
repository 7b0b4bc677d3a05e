# Remote shards end to end against the loopback servers (tests/net.cmake
# starts them: fixture `net`): runs over http, https, S3 and the fault proxy
# give the local run's sample ids; the shard cache on disk (limit, kill -9,
# 4 ranks sharing it); the prefetch look-ahead over many small shards.
foreach(t run faults cache hostile watchdog lookahead)
  set(_args $<TARGET_FILE:zephon_cli>)
  if(t STREQUAL "cache" AND MPIEXEC_EXECUTABLE)
    list(APPEND _args ${MPIEXEC_EXECUTABLE})
  endif()
  add_test(NAME test_remote_${t} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/remote/test_remote_${t}.sh ${_args})
  set_tests_properties(test_remote_${t} PROPERTIES TIMEOUT 300 LABELS "net;remote;tsan"
    FIXTURES_REQUIRED net ENVIRONMENT "ZT_NETENV=${ZP_NETENV}")
endforeach()
# the cache test runs 4 ranks under mpirun: not in the TSan configuration
# (Open MPI is not instrumented), like the other MPI tests
set_tests_properties(test_remote_cache PROPERTIES RUN_SERIAL TRUE LABELS "net;remote")
# No secret of a URL (credentials, signed query) in any output: planted in
# every kind of spec, grepped for in every stream and file (--report runs
# as an MPI singleton: not in the TSan configuration).
add_test(NAME test_remote_secrets
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/remote/test_remote_secrets.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_remote_secrets PROPERTIES TIMEOUT 300 LABELS "net;remote"
  FIXTURES_REQUIRED net ENVIRONMENT "ZT_NETENV=${ZP_NETENV}")
# two users of one node (setpriv to two uids; the suite runs as root): each
# has a private default cache; a folder, link or entry planted by the other
# is refused or replaced, never read
add_test(NAME test_remote_users
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/remote/test_remote_users.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_remote_users PROPERTIES TIMEOUT 120 LABELS "net;remote"
  FIXTURES_REQUIRED net ENVIRONMENT "ZT_NETENV=${ZP_NETENV}")
# SIGTERM to mpirun while both ranks wait on stalled downloads: outputs
# written within mpirun's 2 s grace period, no .part/.lock left
if(MPIEXEC_EXECUTABLE)
  add_test(NAME test_remote_mpi_stop COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/remote/test_remote_mpi_stop.sh
    $<TARGET_FILE:zephon_cli> ${MPIEXEC_EXECUTABLE})
  set_tests_properties(test_remote_mpi_stop PROPERTIES TIMEOUT 90 LABELS "net;remote" RUN_SERIAL TRUE
    FIXTURES_REQUIRED net ENVIRONMENT "ZT_NETENV=${ZP_NETENV}")
endif()
# Listings: an s3:// folder of 5,000 keys (5 pages, sizes from the listing,
# no HEAD), an S3 glob and an http folder with the local run's ids, one
# listing under mpirun (rank 0), S3 errors named (tests/remote/test_remote_list.sh)
set(_args $<TARGET_FILE:zephon_cli>)
if(MPIEXEC_EXECUTABLE)
  list(APPEND _args ${MPIEXEC_EXECUTABLE})
endif()
add_test(NAME test_remote_list COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/remote/test_remote_list.sh ${_args})
set_tests_properties(test_remote_list PROPERTIES TIMEOUT 300 LABELS "net;remote" RUN_SERIAL TRUE
  FIXTURES_REQUIRED net ENVIRONMENT "ZT_NETENV=${ZP_NETENV}")
# A store that throttles (the fault proxy's slowdown:30 at 500 ms a request):
# same sample ids as the local run, the request rate within 1.1x of the
# limit and the downloads at 0.9 of it (docs/storage.md, "Throttling").
# Alone: its rates are measured at the proxy, which the other tests share.
add_test(NAME test_remote_throttle
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/remote/test_remote_throttle.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_remote_throttle PROPERTIES TIMEOUT 180 LABELS "net;remote" RUN_SERIAL TRUE
  FIXTURES_REQUIRED net ENVIRONMENT "ZT_NETENV=${ZP_NETENV}")
