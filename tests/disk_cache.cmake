# The shard cache on disk (src/io/disk_cache.c): threads and processes (fork)
# sharing one folder, leases, takeovers, eviction order and the byte limit.
# No network.
zp_add_test(test_disk_cache SOURCES tests/test_disk_cache.c tests/testutil.c TIMEOUT 120
            LABELS unit tsan)
