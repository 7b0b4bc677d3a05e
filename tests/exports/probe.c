/* A library that exports an internal symbol: test_exports_probe checks
 * that cmake/check_exports.cmake rejects it. */
__attribute__((visibility("default"))) int zp_probe_public(void) { return 1; }
__attribute__((visibility("default"))) int zpi_probe_internal(void) { return 2; }
