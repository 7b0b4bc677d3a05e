# Pipeline engine tests (label "engine": also run under TSan).
zp_add_test(test_pipeline SOURCES tests/test_pipeline.c tests/testutil.c TIMEOUT 300 LABELS engine)
zp_add_test(test_observe SOURCES tests/test_observe.c tests/testutil.c TIMEOUT 120 LABELS engine)
# Attention-cost balance of packed rows (zephon/balance.h).
zp_add_test(test_balance SOURCES tests/test_balance.c TIMEOUT 60)
# The stall watchdog (zephon/watchdog.h).
zp_add_test(test_watchdog SOURCES tests/test_watchdog.c tests/testutil.c TIMEOUT 120 LABELS engine)
# Autotune: settings set to ZP_AUTO (docs/pipeline.md, "Autotune").
zp_add_test(test_autotune SOURCES tests/test_autotune.c tests/testutil.c TIMEOUT 120 LABELS engine)
# The output queue's hand-over to a consumer (output/outq.h).
zp_add_test(test_outq SOURCES tests/test_outq.c TIMEOUT 60 LABELS engine)
