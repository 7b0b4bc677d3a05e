"""The stall watchdog from Python (docs/pipeline.md, "Stall watchdog"):
options(watchdog=) sets its period; while a next() waits on a transform
that sleeps, the pipeline's lines reach the "zephon" logger - before that
next() returns - naming the transform, the shard and the record; 0 turns it
off; a bad value is refused."""
import logging
import time
import unittest

import zptest

from zephon import Dataset, Pipeline, WorkSource


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append((time.monotonic(), record.levelno, record.getMessage()))


def sleepy(rec):
    if rec.get("id") == 17:
        time.sleep(1.2)
    return rec


def run(watchdog):
    """(log records, [(t_before, t_after) of each next()])"""
    h = Collect()
    log = logging.getLogger("zephon")
    log.addHandler(h)
    log.setLevel(logging.INFO)
    try:
        p = (Pipeline(WorkSource(Dataset(str(zptest.small() / "manifest.json")), shuffle=False),
                      threads=2)
             .map_transform(sleepy, name="sleepy").batch(microbatch_size=8)
             .options(watchdog=watchdog))
        calls = []
        it = iter(p)
        while True:
            t0 = time.monotonic()
            try:
                next(it)
            except StopIteration:
                break
            calls.append((t0, time.monotonic()))
        p.close()
        return h.records, calls
    finally:
        log.removeHandler(h)


class TestWatchdog(unittest.TestCase):
    def test_lines_while_waiting(self):
        records, calls = run(0.3)
        wd = [r for r in records if "watchdog:" in r[2]]
        self.assertTrue(wd, "no watchdog line")
        self.assertTrue(all(lvl == logging.WARNING for _, lvl, _ in wd))
        text = "\n".join(m for _, _, m in wd)
        self.assertIn("watchdog: no batch for 0.3 s", text)
        self.assertRegex(text, r"sleepy: running on shard '[^']*shard-00000.jsonl' \(#0\) record 17 for")
        self.assertIn("watchdog: queues: fetch", text)
        # the first line came while a next() was still waiting
        t = wd[0][0]
        self.assertTrue(any(a < t < b for a, b in calls), "the watchdog line came after the wait")

    def test_off_and_bad_values(self):
        records, _ = run(0)
        self.assertFalse([r for r in records if "watchdog:" in r[2]])
        ws = WorkSource(Dataset(str(zptest.small() / "manifest.json")))
        for bad in (-1, "x", 2e6):
            with self.assertRaises(Exception) as cm:
                Pipeline(ws).options(watchdog=bad)
            self.assertIn("watchdog", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
