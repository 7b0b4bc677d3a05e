# Loopback servers for the tests that say NET (see tests/net/README.md): the fixture
# `net` starts nginx (http, https), the fault-injecting proxy and the S3 server before
# those tests and always stops them after; their addresses are in ${ZP_NETENV}.
get_filename_component(_zp_netdir ${ZP_NETENV} DIRECTORY)
set(_zp_net ${CMAKE_CURRENT_LIST_DIR}/net)
add_test(NAME net_servers_start COMMAND bash ${_zp_net}/servers.sh start ${_zp_netdir})
set_tests_properties(net_servers_start PROPERTIES FIXTURES_SETUP net TIMEOUT 120 LABELS net)
add_test(NAME net_servers_stop COMMAND bash ${_zp_net}/servers.sh stop ${_zp_netdir})
set_tests_properties(net_servers_stop PROPERTIES FIXTURES_CLEANUP net TIMEOUT 30 LABELS net)

# The servers behave as the tests rely on: each fault kind of the proxy, Range/ETag
# through nginx and the proxy, https with and without the CA, S3 signed and unsigned.
add_test(NAME test_fault_proxy COMMAND bash ${_zp_net}/test_fault_proxy.sh)
set_tests_properties(test_fault_proxy PROPERTIES FIXTURES_REQUIRED net TIMEOUT 120
  LABELS net ENVIRONMENT "ZT_NETENV=${ZP_NETENV}")
# servers.sh itself on an instance of its own: start, restart over a running one, stop
# leaves no process, a server that cannot start fails naming it.
add_test(NAME test_net_servers COMMAND bash ${_zp_net}/test_servers.sh)
set_tests_properties(test_net_servers PROPERTIES TIMEOUT 120 LABELS net)
