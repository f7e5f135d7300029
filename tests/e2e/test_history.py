"""History, watch, and a force release the holder hears: what a lock did and does.

Every run that reaches a decision leaves one entry in the name's history on the servers
(written in the same write as the release or the refusal); `history` reads a majority and
merges by run. `watch` follows the locks by their channels. `release --force` makes a
running holder stop at once, and says who did it.
"""

import hashlib
import json
import os
import pty
import re
import select
import signal
import time
import unittest

from redlock_e2e import (REDLOCK_BIN, SLACK, E2ETest, append_entries, entries_of, record_of,
                         wait_until)


class HistoryTest(E2ETest):
    servers = 1

    def setUp(self):
        super().setUp()
        self.redis = [self.redis_server() for _ in range(self.servers)]
        self.args = [a for s in self.redis for a in ("-s", s.url())]

    def history(self, name="job", *options, config=None):
        args = (["-c", config] if config else self.args) + ["history", "--json", *options, name]
        r = self.run_redlock(args)
        self.assertStatus(r, 0)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["name"], name)
        return doc["runs"]

    def config(self, text):
        servers = "".join(f'[[servers]]\nurl = "{s.url()}"\n' for s in self.redis)
        path = self.path("config.toml")
        with open(path, "w") as f:
            f.write(text + "\n" + servers)
        return path

    def test_a_crowd_of_no_wait_runs_leaves_one_ran_and_the_others_skipped_by_it(self):
        n = 6
        # The winner holds until every other run has been refused (however slowly a loaded
        # machine starts them), and at least a second.
        done = self.path("done")
        program = ["sh", "-c", 'sleep 1; while [ ! -e "$0" ]; do sleep 0.05; done', done]
        procs = [self.start_redlock(self.args + ["run", "-n", "-k", "job", "--", *program])
                 for _ in range(n)]
        wait_until(lambda: sum(p.poll() is not None for p in procs) == n - 1, 60,
                   message="all runs but one to end")
        open(done, "w").close()
        statuses = [p.wait(60) for p in procs]
        self.assertEqual(sorted(statuses), [0] + [75] * (n - 1))
        runs = self.history()
        self.assertEqual(len(runs), n, runs)
        ran = [r for r in runs if r["outcome"] == "ran"]
        skipped = [r for r in runs if r["outcome"] == "skipped-held"]
        self.assertEqual(len(ran), 1, runs)
        self.assertEqual(len(skipped), n - 1, runs)
        winner = ran[0]
        self.assertEqual(winner["exit_status"], 0)
        self.assertGreaterEqual(winner["held_ms"], 900)
        self.assertIsNotNone(winner["fence"])
        self.assertTrue(winner["command"].startswith("sh -c 'sleep 1; while"), winner)
        self.assertEqual({p.pid for p in procs}, {r["pid"] for r in runs})
        for r in skipped:
            self.assertEqual(r["by"]["pid"], winner["pid"], r)
            self.assertIsNone(r["exit_status"])
            self.assertIsNone(r["fence"])
        # Newest first.
        starts = [r["started_at"] for r in runs]
        self.assertEqual(starts, sorted(starts, reverse=True))

    def test_outcomes_ran_gave_up_and_max_hold(self):
        self.assertStatus(self.run_redlock(self.args + ["run", "-k", "job", "--", "sh", "-c",
                                                        "exit 3"]), 3)
        holder = self.start_redlock(self.args + ["run", "-k", "job", "--", "sleep", "2"])
        wait_until(lambda: self.redis[0].command("EXISTS", "lock:job") == 1, 10, proc=holder)
        self.assertStatus(self.run_redlock(self.args + ["run", "-w", "300ms", "-k", "job", "--",
                                                        "true"]), 75)
        self.assertEqual(holder.wait(30), 0)
        self.assertStatus(self.run_redlock(self.args + ["run", "--max-hold", "300ms", "-k", "job",
                                                        "--", "sleep", "30"]), 124)
        runs = self.history()
        self.assertEqual([r["outcome"] for r in runs], ["max-hold", "gave-up", "ran", "ran"],
                         runs)
        self.assertEqual(runs[0]["exit_status"], 124)
        self.assertGreaterEqual(runs[1]["waited_ms"], 250)
        self.assertEqual(runs[1]["by"]["pid"], holder.pid)
        self.assertEqual(runs[3]["exit_status"], 3)

    def test_a_lost_lease_is_recorded(self):
        holder = self.start_redlock(self.args + ["run", "-k", "job", "-t", "1s", "--", "sleep",
                                                 "30"])
        wait_until(lambda: self.redis[0].command("EXISTS", "lock:job") == 1, 10, proc=holder)
        majority = self.redis[:len(self.redis) // 2 + 1]
        for s in majority:
            s.freeze()
        try:
            self.assertEqual(holder.wait(30), 79)
        finally:
            for s in majority:
                s.thaw()
        # The release (with the entry) was sent to the frozen server: it runs on thaw.
        runs = wait_until(lambda: self.history() or None, 10, message="the entry")
        self.assertEqual(runs[0]["outcome"], "lost")
        self.assertEqual(runs[0]["exit_status"], 79)

    def test_a_force_release_is_heard_at_once_and_both_sides_recorded(self):
        holder = self.start_redlock(self.args + ["run", "-k", "job", "-t", "1m", "--", "sleep",
                                                 "60"])
        wait_until(lambda: self.redis[0].command("EXISTS", "lock:job") == 1, 10, proc=holder)
        self.wait_holder_listening(holder)
        forced_at = time.monotonic()
        r = self.run_redlock(self.args + ["release", "-f", "-y", "job"])
        self.assertStatus(r, 0)
        self.assertEqual(holder.wait(30), 79)
        # Within a round trip or two, not the next renewal (20 s away with a 1 m ttl).
        self.assertLess(time.monotonic() - forced_at, 5.0 * SLACK)
        self.assertIn("it was released by force by", holder.stderr)
        runs = self.history()
        outcomes = {r["outcome"]: r for r in runs}
        self.assertEqual(set(outcomes), {"force-released", "force-release"}, runs)
        self.assertEqual(outcomes["force-released"]["pid"], holder.pid)
        self.assertEqual(outcomes["force-released"]["exit_status"], 79)
        self.assertEqual(outcomes["force-release"]["by"]["pid"], holder.pid)
        forcer = outcomes["force-release"]["pid"]
        self.assertEqual(outcomes["force-released"]["by"]["pid"], forcer)
        self.assertIn(f"(pid {forcer}); stopping PROGRAM", holder.stderr)

    def wait_holder_listening(self, holder):
        # It listens on two servers (on the one, of one).
        wait_until(lambda: sum(s.command("PUBSUB", "NUMSUB", "{lock:job}:events")[1]
                               for s in self.redis) >= min(2, len(self.redis)),
                   10, message="the holder to listen", proc=holder)

    def check_force_release_heard_at_once(self, holder):
        forced_at = time.monotonic()
        r = self.run_redlock(self.args + ["release", "-f", "-y", "job"])
        self.assertStatus(r, 0)
        self.assertEqual(holder.wait(60), 79)
        # Within a round trip or two, not at the next renewal (40 s away with a 2 m ttl).
        self.assertLess(time.monotonic() - forced_at, 10.0 * SLACK)
        self.assertIn("it was released by force by", holder.stderr)

    def test_a_large_message_does_not_keep_a_holder_from_hearing_a_force_release(self):
        holder = self.start_redlock(self.args + ["run", "-k", "job", "-t", "2m", "--", "sleep",
                                                 "120"])
        self.wait_holder_listening(holder)
        for s in self.redis:  # 0.3's holder took it for junk and stopped listening
            s.command("PUBLISH", "{lock:job}:events", "x" * (2 << 20))
        self.check_force_release_heard_at_once(holder)

    def test_a_holder_whose_subscription_was_killed_listens_again(self):
        holder = self.start_redlock(self.args + ["run", "-k", "job", "-t", "2m", "--", "sleep",
                                                 "120"])
        self.wait_holder_listening(holder)
        for s in self.redis:
            s.command("CLIENT", "KILL", "TYPE", "pubsub")
        self.wait_holder_listening(holder)
        self.check_force_release_heard_at_once(holder)

    def test_a_forged_forced_notice_is_not_believed_nor_remembered(self):
        # Anyone may PUBLISH on the events channel. A notice about another token, in 0.3's
        # form, or about ours while it is still ours, must not be blamed for a later loss.
        event = self.path("event")
        holder = self.start_redlock(
            ["-v"] + self.args +
            ["run", "-k", "job", "-t", "3s", "--on-lost", f"echo $REDLOCK_EVENT > {event}",
             "--", "sleep", "60"])
        token = wait_until(lambda: self.redis[0].command("GET", "lock:job"), 10, proc=holder)
        self.wait_holder_listening(holder)
        ours = hashlib.sha1(token.encode()).hexdigest()[:12]
        for s in self.redis:
            for forged in ("0123456789ab", "-", ours):
                s.command("PUBLISH", "{lock:job}:events", f"forced {forged} evil 666 mallory")
        # The one about our token is checked by a renewal, which finds the lock ours.
        wait_until(lambda: re.search(r"a release was announced; checking the lock\n"
                                     r"(.*\n)*redlock: renewed 'job'", holder.stderr),
                   10, message="the check", proc=holder)
        for s in self.redis:  # now it goes, and nobody said so
            s.command("DEL", "lock:job")
        self.assertEqual(holder.wait(30), 79)
        self.assertIn("the lock no longer holds our token", holder.stderr)
        self.assertNotIn("mallory", holder.stderr)
        runs = self.history()
        self.assertEqual((runs[0]["outcome"], runs[0]["by"]), ("lost", None))
        wait_until(lambda: os.path.exists(event), 10, message="the hook")
        with open(event) as f:
            self.assertEqual(f.read(), "lost\n")

    def test_a_force_release_of_a_semaphore_stops_its_holders_and_is_recorded(self):
        holders = [self.start_redlock(self.args + ["run", "-k", "pool", "--limit", "2", "-t",
                                                   "1m", "--", "sleep", "60"])
                   for _ in range(2)]
        wait_until(lambda: self.redis[0].command("ZCARD", "lock:pool") == 2, 10,
                   message="two permits", proc=holders[0])
        # Both listening for a force release (each on two servers, or the one), not a
        # fixed sleep that a loaded machine outlasts.
        wait_until(lambda: sum(s.command("PUBSUB", "NUMSUB", "{lock:pool}:events")[1]
                               for s in self.redis) >= 2 * min(2, len(self.redis)),
                   10, message="both holders to listen", proc=holders[1])
        r = self.run_redlock(self.args + ["release", "-f", "-y", "pool"])
        self.assertStatus(r, 0)
        for holder in holders:
            self.assertEqual(holder.wait(30), 79)
            self.assertIn("it was released by force by", holder.stderr)
        runs = self.history("pool")
        outcomes = sorted(r["outcome"] for r in runs)
        self.assertEqual(outcomes, ["force-release", "force-released", "force-released"], runs)

    def test_the_cap_keeps_the_newest_runs(self):
        config = self.config("history = 3")
        for i in range(5):
            self.assertStatus(self.run_redlock(["-c", config, "run", "-k", "job", "--", "sh",
                                                "-c", f"exit {i}"]), i)
        runs = self.history(config=config)
        self.assertEqual([r["exit_status"] for r in runs], [4, 3, 2])
        self.assertEqual(len(entries_of(self.redis[0], "job")), 3)
        self.assertEqual([r["exit_status"] for r in self.history("job", "-n", "2",
                                                                 config=config)], [4, 3])

    def test_history_off_writes_nothing(self):
        config = self.config("history = 0")
        self.assertStatus(self.run_redlock(["-c", config, "run", "-k", "job", "--", "true"]), 0)
        # Nothing but what fencing needs: the fence counter, in the name's record.
        self.assertEqual(set(record_of(self.redis[0], "job")), {"f"})
        r = self.run_redlock(["-c", config, "history", "job"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, "job: no runs recorded (history = 0 in the config)\n")
        self.assertEqual(self.history("never"), [])

    def test_a_foreign_key_where_0_4_kept_the_history_is_left_alone(self):
        # 0.4's stream, {<key>}:history: a run neither reads nor writes it.
        for s in self.redis:
            s.command("SET", "{lock:job}:history", "not a stream")
        r = self.run_redlock(self.args + ["run", "-k", "job", "--", "true"])
        self.assertStatus(r, 0)
        r = self.run_redlock(self.args + ["history", "--json", "job"])
        self.assertStatus(r, 0)
        self.assertEqual(len(json.loads(r.stdout)["runs"]), 1)
        for s in self.redis:
            self.assertEqual(s.command("GET", "{lock:job}:history"), "not a stream")

    def test_hostile_commands_are_escaped_in_the_table_and_valid_in_json(self):
        nasty = "echo '\x1b[2J\nforged line' \udcff"
        self.assertStatus(self.run_redlock(self.args + ["run", "-k", "job", "--", "sh", "-c",
                                                        nasty]), 0)
        r = self.run_redlock(self.args + ["history", "job"])
        self.assertStatus(r, 0)
        self.assertNotIn("\x1b", r.stdout)
        self.assertEqual(len(r.stdout.splitlines()), 2, r.stdout)  # header and one run
        self.assertIn("\\x1b[2J\\n", r.stdout)
        runs = self.history()
        self.assertIn("\x1b[2J\nforged line", runs[0]["command"])

    def test_status_shows_the_last_run(self):
        self.assertStatus(self.run_redlock(self.args + ["run", "-k", "job", "--", "true"]), 0)
        r = self.run_redlock(self.args + ["status", "job"])
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"  last run  ran, exit 0, \S+@\S+ \(pid \d+\) at ")
        r = self.run_redlock(self.args + ["status", "--json", "job"])
        latest = json.loads(r.stdout)["locks"][0]["latest_run"]
        self.assertEqual((latest["outcome"], latest["exit_status"]), ("ran", 0))


class ForeignEntriesTest(E2ETest):
    """What another client wrote where redlock keeps its records: entries too large to read
    are passed over with a note, numbers that are no times are unknown."""

    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.args = ["-s", self.server.url()]

    def fill(self, name, runs, first=1):
        """Writes `runs` run entries to NAME's history, oldest first."""
        append_entries(self.server, name, [
            {"run": "%016x" % i, "outcome": "ran", "status": "0",
             "started_ms": 1700000000000 + i, "host": "h", "pid": i, "user": "u",
             "command": "c", "waited_ms": 0, "held_ms": 1, "fence": i}
            for i in range(first, first + runs)])

    def test_an_oversized_entry_is_passed_over_with_a_note(self):
        self.fill("job", 3)
        # One entry of 5 MB (past the reader's 4 MB for a whole reply), then newer runs.
        append_entries(self.server, "job", [{"run": "big", "outcome": "ran",
                                             "command": "x" * (5 << 20)}])
        self.fill("job", 2, first=4)
        r = self.run_redlock(self.args + ["history", "job"])
        self.assertStatus(r, 0)
        self.assertEqual(len(r.stdout.splitlines()), 6, r.stdout)  # header and five runs
        self.assertEqual(r.stderr, "redlock: history of 'job': 1 entry passed over (not a "
                                   "run's, or larger than 64 KB: written by another client)\n")
        r = self.run_redlock(self.args + ["history", "--json", "-n", "3", "job"])
        self.assertStatus(r, 0)
        doc = json.loads(r.stdout)
        self.assertEqual([run["pid"] for run in doc["runs"]], [5, 4, 3])
        self.assertEqual(doc["skipped"], 1)
        # status reads the newest run alone, past such an entry too.
        append_entries(self.server, "job", [{"run": "big", "outcome": "ran",
                                             "command": "x" * (5 << 20)}])
        r = self.run_redlock(self.args + ["status", "job"])
        self.assertStatus(r, 0)
        self.assertIn("  last run  ran, exit 0, u@h (pid 5) at ", r.stdout)

    def test_as_many_runs_as_documented_are_read_in_pages(self):
        self.fill("job", 3100)
        r = self.run_redlock(self.args + ["history", "--json", "-n", "3000", "job"])
        self.assertStatus(r, 0)
        runs = json.loads(r.stdout)["runs"]
        self.assertEqual(len(runs), 3000)
        self.assertEqual((runs[0]["pid"], runs[-1]["pid"]), (3100, 101))
        self.assertEqual(len({run["run"] for run in runs}), 3000)
        r = self.run_redlock(self.args + ["history", "--json", "-n", "100000", "job"])
        self.assertStatus(r, 0)
        self.assertEqual(len(json.loads(r.stdout)["runs"]), 3100)

    def test_absurd_times_in_a_history_entry_are_unknown(self):
        big, small = str(2**63 - 1), str(-2**63)
        append_entries(self.server, "job", [
            {"run": "forged", "outcome": "ran", "status": "0", "host": "h", "pid": "1",
             "user": "u", "command": "c", "started_ms": big, "waited_ms": small,
             "held_ms": big}])
        r = self.run_redlock(self.args + ["history", "job"])
        self.assertStatus(r, 0)
        row = r.stdout.splitlines()[1]
        self.assertRegex(row, r"^-\s+h\s+1\s+u\s+-\s+-\s+-\s+ran, exit 0: c$")
        r = self.run_redlock(self.args + ["history", "--json", "job"])
        self.assertStatus(r, 0)
        run = json.loads(r.stdout)["runs"][0]
        self.assertEqual((run["started_at"], run["waited_ms"], run["held_ms"]),
                         (None, None, None))
        r = self.run_redlock(self.args + ["status", "job"])
        self.assertStatus(r, 0)
        self.assertIn("  last run  ran, exit 0, u@h (pid 1) at -\n", r.stdout)
        # A real run is newer than one whose start is unknown.
        self.assertStatus(self.run_redlock(self.args + ["run", "-k", "job", "--", "true"]), 0)
        runs = json.loads(self.run_redlock(self.args + ["history", "--json", "job"]).stdout)
        self.assertEqual([r["run"] == "forged" for r in runs["runs"]], [False, True])

    def test_an_absurd_slot_record_or_ttl_is_no_time(self):
        big = str(2**63 - 1)
        # The --once-per record, as k_slot_fields lays it out in the name's record.
        self.server.command("HSET", "{lock:job}:fence", "s",
                            "\0".join([big, big, "t", "1", big, "0"]))
        self.server.command("SET", "lock:job", "t", "PX", str(9 * 10**15))
        r = self.run_redlock(self.args + ["status", "--json", "job"])
        self.assertStatus(r, 0)
        lock = json.loads(r.stdout)["locks"][0]
        self.assertIsNone(lock["last_run"])
        self.assertLessEqual(lock["ttl_ms"], 100 * 365 * 86400 * 1000)
        r = self.run_redlock(self.args + ["status", "job"])
        self.assertStatus(r, 0)
        self.assertNotIn("slot", r.stdout)


class HistoryFiveServersTest(HistoryTest):
    servers = 5

    def test_a_minority_down_while_writing_and_while_reading_loses_nothing(self):
        self.redis[0].freeze()
        self.redis[1].freeze()
        try:
            for i in range(3):
                self.assertStatus(self.run_redlock(self.args + ["run", "-k", "job", "--", "sh",
                                                                "-c", f"exit {i}"]), i)
        finally:
            self.redis[0].thaw()
            self.redis[1].thaw()
        # Two others down while reading: the three read may not all have every entry, but a
        # majority read together does.
        self.redis[3].freeze()
        self.redis[4].freeze()
        try:
            runs = wait_until(lambda: len(self.history()) == 3 and self.history(), 20,
                              message="all three runs")
        finally:
            self.redis[3].thaw()
            self.redis[4].thaw()
        self.assertEqual([r["exit_status"] for r in runs], [2, 1, 0])

    def test_fewer_than_a_majority_cannot_be_read(self):
        for s in self.redis[:3]:
            s.freeze()
        try:
            r = self.run_redlock(self.args + ["history", "job"], timeout=60)
        finally:
            for s in self.redis[:3]:
                s.thaw()
        self.assertStatus(r, 69)
        self.assertIn("cannot read the history of 'job': 2 of 5 servers answered, 3 needed",
                      r.stderr)


class WatchTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.args = ["-s", self.server.url()]

    def test_watch_json_follows_a_holder_appearing_and_going(self):
        watch = self.start_redlock(self.args + ["watch", "--json"])
        wait_until(lambda: int(self.server.command("PUBSUB", "NUMPAT")) >= 2, 10,
                   message="watch to subscribe", proc=watch)
        holder = self.start_redlock(self.args + ["run", "-k", "job", "--", "sleep", "0.5"])
        self.assertEqual(holder.wait(30), 0)

        def lines():
            return [json.loads(line) for line in watch.stdout.splitlines() if line.strip()]

        wait_until(lambda: any(e["state"] == "free" for e in lines()), 10,
                   message="watch to see the release", proc=watch)
        events = lines()
        held = [e for e in events if e["state"] == "held"]
        self.assertTrue(held, events)
        self.assertEqual(held[0]["name"], "job")
        self.assertEqual(held[0]["holder"]["pid"], holder.pid)
        # Told as "acquired"; if watch's first look at the locks, just after it subscribed,
        # came later than the acquisition, a "watching" line first.
        self.assertIn("acquired", [e["event"] for e in held], events)
        self.assertIn(held[0]["event"], ("acquired", "watching"), events)
        watch.send_signal(signal.SIGINT)
        self.assertEqual(watch.wait(10), 0)

    def test_watch_tells_an_expiry_and_keeps_quiet_about_renewals(self):
        # Not a terminal, no --json: JSON lines all the same.
        watch = self.start_redlock(self.args + ["watch"])
        wait_until(lambda: int(self.server.command("PUBSUB", "NUMPAT")) >= 2, 10,
                   message="watch to subscribe", proc=watch)
        # A holder renewing a 1 s lease for 3 s: its lease runs out three times over in
        # watch's view, and is renewed each time. Then one left to expire.
        holder = self.start_redlock(self.args + ["run", "-k", "renewed", "-t", "1s", "--",
                                                 "sleep", "3"])
        r = self.run_redlock(self.args + ["acquire", "-t", "1s", "left"])
        self.assertStatus(r, 0)

        def lines():
            return [json.loads(line) for line in watch.stdout.splitlines() if line.strip()]

        wait_until(lambda: any(e["name"] == "left" and e["event"] == "expired" for e in lines()),
                   10, message="watch to see the expiry", proc=watch)
        self.assertEqual(holder.wait(30), 0)
        wait_until(lambda: any(e["name"] == "renewed" and e["state"] == "free" for e in lines()),
                   10, message="watch to see the release", proc=watch)
        renewed = [e for e in lines() if e["name"] == "renewed"]
        self.assertNotIn("expired", [e["event"] for e in renewed], renewed)
        # Still alive and answering signals after a lock went away under it.
        watch.send_signal(signal.SIGTERM)
        self.assertEqual(watch.wait(10), 0)

    def test_watch_counts_waiters_not_the_holder(self):
        watch = self.start_redlock(self.args + ["watch", "--json"])
        wait_until(lambda: int(self.server.command("PUBSUB", "NUMPAT")) >= 2, 10,
                   message="watch to subscribe", proc=watch)
        holder = self.start_redlock(self.args + ["run", "-k", "job", "--", "sleep", "30"])
        wait_until(lambda: self.server.command("EXISTS", "lock:job") == 1, 10, proc=holder)
        # The holder listens for a force release from 100 ms on: on the events channel.
        wait_until(lambda: self.server.command("PUBSUB", "NUMSUB", "{lock:job}:events")[1] == 1,
                   10, message="the holder to listen", proc=holder)
        self.assertEqual(self.server.command("PUBSUB", "NUMSUB", "{lock:job}:released")[1], 0)
        r = self.run_redlock(self.args + ["release", "-f", "-y", "job"])
        self.assertStatus(r, 0)
        self.assertEqual(holder.wait(30), 79)

        def lines():
            return [json.loads(line) for line in watch.stdout.splitlines() if line.strip()]

        wait_until(lambda: any(e["event"] == "released by force" for e in lines()), 10,
                   message="watch to hear the force", proc=watch)
        self.assertEqual({e["waiters"] for e in lines()}, {0}, lines())
        watch.send_signal(signal.SIGINT)
        self.assertEqual(watch.wait(10), 0)

    def test_watch_over_three_servers_tells_each_event_once(self):
        servers = [self.server] + [self.redis_server() for _ in range(2)]
        args = [a for s in servers for a in ("-s", s.url())]
        watch = self.start_redlock(args + ["watch", "--json"])
        wait_until(lambda: all(int(s.command("PUBSUB", "NUMPAT")) >= 2 for s in servers), 10,
                   message="watch to subscribe", proc=watch)
        for i in range(2):
            self.assertStatus(self.run_redlock(args + ["run", "-k", "job", "--", "true"]), 0)

        def events():
            # ("watching": the lock read again as a later server's notice came.)
            return [e for e in (json.loads(line)["event"] for line in watch.stdout.splitlines()
                                if line.strip()) if e != "watching"]

        wait_until(lambda: events().count("run recorded") >= 2, 10,
                   message="watch to hear both runs", proc=watch)
        time.sleep(0.3)  # anything more it would (wrongly) tell
        self.assertEqual(events(), ["acquired", "released", "run recorded"] * 2)
        watch.send_signal(signal.SIGINT)
        self.assertEqual(watch.wait(10), 0)

    def test_watch_on_a_terminal_draws_and_leaves_the_screen_as_it_was(self):
        holder = self.start_redlock(self.args + ["run", "-k", "shown", "--", "sleep", "30"])
        wait_until(lambda: self.server.command("EXISTS", "lock:shown") == 1, 10, proc=holder)
        pid, fd = pty.fork()
        if pid == 0:
            env = self.env({"TERM": "xterm"})
            os.execve(REDLOCK_BIN, [REDLOCK_BIN, *self.args, "watch"], env)
        seen = b""
        deadline = time.monotonic() + 10 * SLACK
        try:
            while b"shown" not in seen and time.monotonic() < deadline:
                r, _, _ = select.select([fd], [], [], 0.2)
                if r:
                    seen += os.read(fd, 65536)
            self.assertIn(b"\x1b[?1049h", seen)  # the alternate screen
            self.assertIn(b"shown", seen)
            self.assertIn(b"held", seen)
            os.kill(pid, signal.SIGINT)
            end = time.monotonic() + 10 * SLACK
            status = None
            while time.monotonic() < end:
                try:
                    r, _, _ = select.select([fd], [], [], 0.2)
                    if r:
                        seen += os.read(fd, 65536)
                except OSError:
                    pass
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
            self.assertEqual(os.waitstatus_to_exitcode(status), 0)
            self.assertTrue(seen.rstrip().endswith(b"\x1b[?1049l"), seen[-80:])
        finally:
            os.close(fd)
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            holder.send_signal(signal.SIGTERM)
            holder.wait(30)


if __name__ == "__main__":
    unittest.main()
