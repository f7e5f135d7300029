"""What a name leaves on the servers (issue 47): after its runs, in every mode, one key, its
record {<prefix><NAME>}:fence, which expires the history's age (and a sixteenth) after the
name's last run; nothing lives forever. A fence given after the record expired is still
larger than every one before (a counter that is not there starts from the server's clock).
"""

import json
import unittest

from redlock_e2e import E2ETest, record_key, record_of, wait_until

AGE_MS = 3600 * 1000  # history_max_age = "1h" below


class FootprintTest(E2ETest):
    servers = 1

    def setUp(self):
        super().setUp()
        self.redis = [self.redis_server() for _ in range(self.servers)]
        self.args = [a for s in self.redis for a in ("-s", s.url())]

    def config(self, extra=""):
        servers = "".join(f'[[servers]]\nurl = "{s.url()}"\n' for s in self.redis)
        return self.write_file("footprint.toml", f'history_max_age = "1h"\n{extra}\n{servers}')

    def run_once(self, name, *options, config=None):
        r = self.run_redlock(["-c", config or self.config(), "run", "-k", name, *options, "--",
                              "sh", "-c", 'printf "%s" "$REDLOCK_FENCE"'])
        self.assertStatus(r, 0)
        return int(r.stdout)

    def assertOneRecord(self, name, longest_ms=AGE_MS + AGE_MS // 16, compact=True):
        """On every server: the record alone (once the stragglers' requests ran), expiring
        after the age at least and `longest_ms` at most; `compact`: in Redis's compact
        encoding (an entry of more than 252 bytes, a long command, is stored whole, and a
        record that holds one is not: Holder's command is one)."""
        for s in self.redis:
            key = record_key(name)
            wait_until(lambda: sorted(s.command("KEYS", f"*{name}*")) == [key], 10,
                       message=f"only {key} left on {s.url()}: {s.command('KEYS', '*')}")
            pttl = s.command("PTTL", key)
            self.assertGreater(pttl, AGE_MS - 60000, s.url())
            self.assertLessEqual(pttl, longest_ms, s.url())
            if compact:
                encoding = s.command("OBJECT", "ENCODING", key)
                self.assertIn(encoding, ("listpack", "ziplist"), s.url())

    def test_a_run_leaves_its_record_alone_and_it_expires(self):
        self.run_once("plain")
        self.assertOneRecord("plain")
        self.assertEqual(record_of(self.redis[0], "plain")["f"] != "", True)

    def test_a_waiter_that_waited_leaves_nothing_more(self):
        config = self.config()
        holder = self.holder(["-k", "waited"], global_args=["-c", config]).wait_ready()
        waiter = self.start_redlock(["-c", config, "run", "-k", "waited", "-w", "30s", "--",
                                     "true"])
        wait_until(lambda: self.redis[0].command("EXISTS", "{lock:waited}:waiters") == 1, 10,
                   message="the waiter to enlist", proc=waiter)
        self.assertEqual(holder.release(), 0)
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        self.assertOneRecord("waited", compact=False)

    def test_limit_leaves_the_record_alone_with_the_permits_counters(self):
        for _ in range(2):
            self.run_once("pool", "--limit", "2")
        self.assertOneRecord("pool")
        self.assertTrue(set(record_of(self.redis[0], "pool")) & {"f1", "f2"})

    def test_fair_leaves_the_record_alone(self):
        config = self.config()
        holder = self.holder(["-k", "line", "--fair"], global_args=["-c", config]).wait_ready()
        waiter = self.start_redlock(["-c", config, "run", "-k", "line", "--fair", "-w", "30s",
                                     "--", "true"])
        wait_until(lambda: self.redis[0].command("EXISTS", "{lock:line}:queue") == 1, 10,
                   message="the waiter to join the queue", proc=waiter)
        self.assertEqual(holder.release(), 0)
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        self.assertOneRecord("line", compact=False)

    def test_once_per_keeps_the_record_two_slots_if_longer(self):
        self.run_once("daily", "--once-per", "2h")
        self.assertOneRecord("daily", longest_ms=2 * 2 * AGE_MS)
        self.assertGreater(self.redis[0].command("PTTL", record_key("daily")),
                           2 * 2 * AGE_MS - 60000)

    def test_history_0_leaves_only_the_fence(self):
        self.run_once("quiet", config=self.config("history = 0"))
        self.assertOneRecord("quiet")
        self.assertEqual(set(record_of(self.redis[0], "quiet")), {"f"})

    def test_a_fence_after_the_record_expired_is_larger_than_every_one_before(self):
        fences = [self.run_once("seq") for _ in range(3)]
        # The name unused past its age: its record expires (made to now, as the age would).
        for s in self.redis:
            s.command("PEXPIRE", record_key("seq"), "1")
            wait_until(lambda: s.command("EXISTS", record_key("seq")) == 0, 10,
                       message="the record to expire")
        fences.append(self.run_once("seq"))
        self.assertEqual(fences[:3], [fences[0], fences[0] + 1, fences[0] + 2])
        self.assertGreater(fences[3], fences[2])

    def test_status_reads_a_free_name_by_its_record(self):
        fence = self.run_once("seen")
        r = self.run_redlock(["-c", self.config(), "status", "--json", "seen"])
        self.assertStatus(r, 0)
        lock = json.loads(r.stdout)["locks"][0]
        self.assertEqual(lock["state"], "free")
        self.assertEqual(lock["fence"], fence)


class FootprintThreeServersTest(FootprintTest):
    servers = 3


if __name__ == "__main__":
    unittest.main()
