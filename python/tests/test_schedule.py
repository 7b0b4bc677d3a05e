"""Mixture weight schedules from Python (docs/mixtures.md, "Weight
schedules"): WorkSource(schedule=...) changes the weights at a draw, the
per-phase proportions are in info() and metrics_snapshot(), a state_dict
taken before the change resumes byte-identically across it, and a state
resumed with another schedule delivers no sample twice and follows the new
weights from the draw past what it delivered (Megatron-LM #457)."""
import collections
import unittest

import zptest  # noqa: F401  (sets sys.path)

from zephon import Dataset, Pipeline, WorkSource

MIX = [("a", 2, 0.7), ("b", 1, 0.2), ("c", 1, 0.1)]  # 300, 150, 150 records


def pipeline(schedule, state=None):
    ws = WorkSource(Dataset(str(zptest.small() / "manifest.json")), seed=3, mixture=MIX,
                    epoch_samples=200, schedule=schedule)
    p = Pipeline(ws).batch(microbatch_size=10)
    p.enable_observability()
    if state is not None:
        p.load_state_dict(state)
    return ws, p


def parts_of(batches):
    return collections.Counter(s[6] for b in batches for s in b)


class TestSchedule(unittest.TestCase):
    STEP = [{"at": 80, "weights": {"a": 0.1, "b": 0.3, "c": 0.6}}]

    def test_weights_change_at_the_draw(self):
        ws, p = pipeline(self.STEP)
        self.assertEqual(ws.info()["phases"], [(0, [0.7, 0.2, 0.1]), (80, [0.1, 0.3, 0.6])])
        samples = [b.samples for b in p]
        self.assertEqual(len(samples), 20)
        self.assertEqual(parts_of(samples[:8]), {0: 56, 1: 16, 2: 8})
        self.assertEqual(parts_of(samples[8:]), {0: 12, 1: 36, 2: 72})
        m = p.metrics_snapshot()
        self.assertEqual([(ph["start"], ph["samples"]) for ph in m["phases"]], [(0, 80), (80, 120)])
        self.assertEqual([x["samples"] for x in m["phases"][1]["parts"]], [12, 36, 72])
        self.assertAlmostEqual(m["phases"][1]["parts"][2]["weight"], 0.6)
        # without the schedule the weights hold throughout
        _, plain = pipeline(None)
        self.assertEqual(parts_of([b.samples for b in plain][8:]), {0: 84, 1: 24, 2: 12})

    def test_linear_and_tuples(self):
        ws, _ = pipeline([(100, [0.1, 0.3, 0.6], 25)])
        starts = [s for s, _ in ws.info()["phases"]]
        self.assertEqual(starts, [0, 25, 50, 75, 100])
        self.assertAlmostEqual(ws.info()["phases"][1][1][0], 0.7 - 0.6 * 0.375)
        with self.assertRaisesRegex(ValueError, "no weight for part 'c'"):
            pipeline([{"at": 10, "weights": {"a": 1, "b": 1}}])
        with self.assertRaises(Exception):
            pipeline([{"at": 0, "weights": [1, 1, 1]}])

    def test_resume_across_the_change_is_exact(self):
        _, p = pipeline(self.STEP)
        it = iter(p)
        first = [next(it).digest() for _ in range(5)]
        state = p.state_dict()
        rest = [b.digest() for b in it]
        _, q = pipeline(self.STEP, state)
        self.assertEqual([b.digest() for b in q], rest)
        self.assertEqual(len(first + rest), 20)

    def test_resume_with_a_new_schedule(self):
        _, p = pipeline(self.STEP)
        it = iter(p)
        before = [next(it).samples for _ in range(5)]  # draws 0 .. 49
        state = p.state_dict()
        new = [{"at": 30, "weights": [0.2, 0.2, 0.6]}]
        ws, q = pipeline(new, state)
        after = [b.samples for b in q]
        # (ws describes the configured schedule; the pipeline follows the merged one)
        self.assertEqual(ws.info()["phases"], [(0, [0.7, 0.2, 0.1]), (30, [0.2, 0.2, 0.6])])
        ids = [s[2] for b in before + after for s in b]
        # every part is smaller than its draws here: no sample may come twice
        self.assertEqual(len(ids), 200)
        self.assertEqual(len(set(ids)), 200)
        # the new weights from draw 50 (the resumed position), not from 30
        self.assertEqual(parts_of(after), {0: 30, 1: 30, 2: 90})
        m = q.metrics_snapshot()
        self.assertEqual([(ph["start"], ph["samples"]) for ph in m["phases"]], [(0, 50), (50, 150)])
        self.assertEqual(q.state_dict()["schedule"]["since"], 50)


if __name__ == "__main__":
    unittest.main()
