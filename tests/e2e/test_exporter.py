"""`redlock exporter`: the fleet on /metrics, / and /api/locks (issue 39).

Counters are kept on the servers by the history script (no command more for a run), read
by the exporter as the largest of each over the servers that answered; the page is
complete as served and kept live by its script; Prometheus scrapes it and Chromium shows
it. Tools that are missing (promtool, prometheus, chromium) skip their test with a
message; scripts/setup.sh installs them.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from redlock_e2e import (SLACK, E2ETest, RespClient, append_entries, entries_of, free_port,
                         record_of, server_version, wait_until)
from test_monitoring import REPO, parse_metrics, sample

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EXAMPLES = os.path.join(REPO, "packaging", "examples")

# Every outcome `every_outcome` produces, and how often (force-release: the operator's
# entry of `release --force`, beside the holder's force-released).
EVERY_OUTCOME = {"ran": 4, "skipped-held": 1, "gave-up": 1, "max-hold": 1, "failed": 1,
                 "skipped-slot": 1, "lost": 1, "force-released": 1, "force-release": 1,
                 "interrupted": 0, "stopped": 0}
RAN_PROGRAM = 7  # ran, max-hold, lost, force-released


def documented_exporter_acl():
    """The rules of redlock(1)'s `redis-cli ACL SETUSER exporter ...` (EXPORTER)."""
    with open(os.path.join(REPO, "man", "redlock.1")) as f:
        text = f.read()
    start = text.index("redis\\-cli ACL SETUSER exporter")
    block = text[start:text.index(".EE", start)]
    block = block.replace("\\(aq", "'").replace("\\e\n", " ").replace("\\-", "-")
    words = [w.strip("'") for w in block.split()[4:]]
    return [w for w in words if w != ">PASSWORD"]


class ExporterTest(E2ETest):
    def start_exporter(self, args, *more):
        proc = self.start_redlock(list(args) + ["exporter", "--listen", "127.0.0.1:0", *more])
        wait_until(lambda: "http://" in proc.stderr, 20, message="the exporter to listen",
                   proc=proc)
        address = re.search(r"http://([0-9.]+:\d+)/", proc.stderr).group(1)
        return proc, address

    def get(self, address, path, method="GET"):
        request = urllib.request.Request(f"http://{address}{path}", method=method)
        try:
            with urllib.request.urlopen(request, timeout=20 * SLACK) as r:
                return r.status, dict(r.headers), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read().decode()

    def metrics(self, address):
        status, headers, text = self.get(address, "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        if PROMTOOL:
            r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                               text=True, timeout=60)
            self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""), text)
        return parse_metrics(text)

    def every_outcome(self, args, live):
        """Runs of `job` ending in every outcome (EVERY_OUTCOME); `live`: the servers that
        answer, where a lost lease is made by deleting the lock."""
        def run(words, expected):
            self.assertStatus(self.run_redlock(args + ["run", "-k", "job"] + words), expected)

        run(["--", "true"], 0)
        run(["--", "sh", "-c", "exit 3"], 3)
        holder = self.holder(["-k", "job"], global_args=args).wait_ready()
        run(["-n", "--", "true"], 75)
        run(["-w", "0.3", "--", "true"], 75)
        self.assertEqual(holder.release(), 0)
        run(["--max-hold", "0.3", "--", "sleep", "30"], 124)
        run(["--", "/nonexistent/program"], 127)
        run(["--once-per", "1h", "--", "true"], 0)
        run(["--once-per", "1h", "--", "true"], 75)
        holder = self.holder(["-k", "job", "-t", "1s"], global_args=args).wait_ready()
        for s in live:
            s.command("DEL", "lock:job")
        self.assertEqual(holder.proc.wait(30), 79)
        holder = self.holder(["-k", "job"], global_args=args).wait_ready()
        # Listening for a force release (on a server that answers), else it would learn of
        # it only at its next renewal, as a lost lease.
        wait_until(lambda: sum(s.command("PUBSUB", "NUMSUB", "{lock:job}:events")[1]
                               for s in live) >= 1,
                   10, message="the holder to listen", proc=holder.proc)
        self.assertStatus(self.run_redlock(args + ["release", "--force", "--yes", "job"]), 0)
        self.assertEqual(holder.proc.wait(30), 79)

    def assertCountsExact(self, m):
        for outcome, n in EVERY_OUTCOME.items():
            # An outcome that never happened to the name is no series (issue 47).
            self.assertEqual(sample(m, "redlock_runs_total", name="job", outcome=outcome),
                             n or None, outcome)
        self.assertEqual(sample(m, "redlock_run_duration_seconds_count", name="job"), RAN_PROGRAM)
        self.assertEqual(sample(m, "redlock_run_duration_seconds_bucket", name="job", le="+Inf"),
                         RAN_PROGRAM)
        success = sample(m, "redlock_last_success_timestamp_seconds", name="job")
        last = sample(m, "redlock_last_run_timestamp_seconds", name="job")
        # Moved by the runs that exited 0, not by the lost and forced ones after them.
        self.assertGreater(success, 1.6e9)
        self.assertLess(success, last)
        self.assertEqual(sample(m, "redlock_slot_seconds", name="job"), 3600)
        self.assertEqual(sample(m, "redlock_held", name="job"), 0)


class CountersTest(ExporterTest):
    def test_counters_are_exact_after_runs_of_every_outcome_over_one_server(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        self.every_outcome(args, [server])
        exporter, address = self.start_exporter(args)
        m = self.metrics(address)
        self.assertCountsExact(m)
        self.assertEqual(sample(m, "redlock_server_up", server=f"127.0.0.1:{server.port}"), 1)
        # A name that never succeeded: 0, so that "no success for a day" fires.
        self.assertStatus(self.run_redlock(args + ["run", "-k", "never", "--once-per", "1d",
                                                   "--", "false"]), 1)
        m = self.metrics(address)
        self.assertEqual(sample(m, "redlock_last_success_timestamp_seconds", name="never"), 0)
        self.assertEqual(sample(m, "redlock_overdue", name="never"), 1)
        self.assertEqual(sample(m, "redlock_overdue", name="job"), 0)
        exporter.send_signal(signal.SIGTERM)
        self.assertEqual(exporter.wait(10), 0)

    def test_counters_are_exact_over_three_servers_with_one_frozen(self):
        servers = [self.redis_server() for _ in range(3)]
        args = [a for s in servers for a in ("-s", s.url())]
        servers[2].freeze()
        try:
            self.every_outcome(args, servers[:2])
            exporter, address = self.start_exporter(args)
            m = self.metrics(address)
            self.assertCountsExact(m)
            for s, up in zip(servers, (1, 1, 0)):
                self.assertEqual(sample(m, "redlock_server_up", server=f"127.0.0.1:{s.port}"), up)
            exporter.send_signal(signal.SIGINT)
            self.assertEqual(exporter.wait(10), 0)
        finally:
            servers[2].thaw()

    def test_releases_a_frozen_server_gets_late_do_not_move_the_last_success_to_its_thaw(self):
        servers = [self.redis_server() for _ in range(3)]
        args = [a for s in servers for a in ("-s", s.url())]
        frozen = servers[2]
        frozen.freeze()
        self.addCleanup(frozen.thaw)
        first = time.time()
        for _ in range(5):
            self.assertStatus(self.run_redlock(args + ["run", "-k", "job", "--", "true"]), 0)
        ended = time.time()
        # The frozen server runs the five releases (and their entries) when it resumes,
        # a moment after the last run ended: they are recorded when the runs ended.
        time.sleep(0.5)
        thawed = time.time()
        frozen.thaw()
        wait_until(lambda: len(entries_of(frozen, "job")) == 5, 10,
                   message="the frozen server to run the releases it was sent")
        for s in servers:
            # The counters are of the runs before the newest (a reading adds it).
            stats = record_of(s, "job")
            self.assertEqual(stats["r:ran"], "4", s.url())
            for field in ("ls", "lr"):
                self.assertGreaterEqual(int(stats[field]), int(first * 1000), (s.url(), field))
                self.assertLessEqual(int(stats[field]), int(ended * 1000), (s.url(), field))
            for entry in entries_of(s, "job"):
                self.assertLessEqual(int(entry["started_ms"]), int(ended * 1000), s.url())
        _, address = self.start_exporter(args)
        m = self.metrics(address)
        success = sample(m, "redlock_last_success_timestamp_seconds", name="job")
        self.assertLess(success, thawed)
        self.assertLessEqual(success, ended)
        self.assertEqual(sample(m, "redlock_runs_total", name="job", outcome="ran"), 5)

    def test_history_0_keeps_only_the_fence_and_counts_nothing(self):
        # history = 0 leaves on the servers nothing but what fencing needs (issue 47): the
        # counters go with the history.
        server = self.redis_server()
        config = self.write_file("c.toml", f'history = 0\n[[servers]]\nurl = "{server.url()}"\n')
        for _ in range(2):
            self.assertStatus(self.run_redlock(["-c", config, "run", "-k", "job", "--", "true"]), 0)
        self.assertEqual(set(record_of(server, "job")), {"f"})
        _, address = self.start_exporter(["-c", config])
        self.assertFalse(sample(self.metrics(address), "redlock_runs_total", name="job",
                                outcome="ran"))

    def test_a_run_sends_no_command_more_for_its_counters(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        self.assertStatus(self.run_redlock(args + ["run", "-k", "job", "--", "true"]), 0)
        with RespClient(server.address) as monitor:
            monitor.sock.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
            self.assertEqual(monitor._read_reply(), "OK")
            self.assertStatus(self.run_redlock(args + ["run", "-k", "job", "--", "true"]), 0)
            server.command("PING")
            sent = []
            while True:
                line = monitor._read_reply()
                if '"PING"' in line and "lua]" not in line:
                    break
                if "lua]" not in line:
                    sent.append(line.split('"')[1])
        # The acquisition, the release, the history (with the counters): as in 0.3.
        self.assertEqual(sent, ["EVAL", "EVAL", "EVAL"])
        self.assertEqual(server.command("HGET", "{lock:job}:fence", "r:ran"), "1")


class ForeignNumbersTest(ExporterTest):
    """Counters another client wrote past belief (any client that may write the lock keys
    may write them): counts from 0 to 2^53 and times from 1970 to 9999 are read, anything
    else is unknown. Two buckets at 2^63-1 overflowed the histogram's sum (UBSan aborted;
    a Release build served negative, decreasing buckets), a last run at 2^63-1 showed as
    "ended at -6911-07-12T07:12:5Z", and a slot of 2^63-1 overflowed the overdue check."""

    def test_absurd_counters_are_unknown_and_the_rest_is_served(self):
        server = self.redis_server()
        big = str(2**63 - 1)
        # The counters of the runs before the newest, in the record's short names.
        server.command("HSET", "{lock:job}:fence", "r:ran", "2", "r:lost", str(2**60),
                       "r:failed", "-5", "d1", big, "d5", big, "d10", "2",
                       "d+", "1", "ds", big, "lr", big, "ls", big, "sl", big)
        # The newest entry (a reading counts it, held 15 s: in the 30 s bucket).
        append_entries(server, "job", [
            {"run": "r1", "outcome": "ran", "status": "0", "host": "h", "pid": "1",
             "user": "u", "command": "c", "started_ms": str(10**14 * 2),
             "waited_ms": str(10**14 * 2), "held_ms": "15000"}])
        # A holder whose metadata says it took the lock in the year 1.
        server.command("SET", "lock:old", "tok", "PX", "60000")
        server.command("HSET", "{lock:old}:meta", "token", "tok", "host", "h", "pid", "1",
                       "user", "u", "command", "c", "acquired_at", "0001-01-01T00:00:00.000Z")
        _, address = self.start_exporter(["-s", server.url()])
        m = self.metrics(address)
        self.assertEqual(sample(m, "redlock_runs_total", name="job", outcome="ran"), 3)
        self.assertIsNone(sample(m, "redlock_runs_total", name="job", outcome="lost"))
        self.assertIsNone(sample(m, "redlock_runs_total", name="job", outcome="failed"))
        buckets = [sample(m, "redlock_run_duration_seconds_bucket", name="job", le=le)
                   for le in ("1", "5", "10", "86400", "+Inf")]
        self.assertEqual(buckets, [0, 0, 2, 3, 4])
        self.assertEqual(sample(m, "redlock_run_duration_seconds_count", name="job"), 4)
        self.assertIsNone(sample(m, "redlock_last_run_timestamp_seconds", name="job"))
        self.assertEqual(sample(m, "redlock_last_success_timestamp_seconds", name="job"), 0)
        self.assertIsNone(sample(m, "redlock_slot_seconds", name="job"))
        self.assertIsNone(sample(m, "redlock_overdue", name="job"))
        self.assertEqual(sample(m, "redlock_held", name="old"), 1)
        self.assertIsNone(sample(m, "redlock_held_seconds", name="old"))
        status, _, page = self.get(address, "/")
        self.assertEqual(status, 200)
        row = re.search(r"<tr[^>]*><td>job</td>.*?</tr>", page).group(0)
        # The entry's end (start, wait and hold added up) is past 9999: not shown.
        self.assertIn("<td>ran (exit 0) on h</td><td>never</td><td>-</td>", row)
        self.assertIn("<td>old</td><td>held</td><td>u@h:1 c</td><td>-</td>", page)
        locks = {lock["name"]: lock for lock in json.loads(self.get(address, "/api/locks")[2])
                 ["locks"]}
        self.assertEqual((locks["job"]["last_run_at"], locks["job"]["last_success_at"],
                          locks["job"]["slot_seconds"]), (None, None, None))
        self.assertEqual(locks["job"]["runs"], {"ran": 3})
        self.assertIsNone(locks["old"]["held_seconds"])


class ServedTest(ExporterTest):
    def test_a_server_down_shows_0_and_the_rest_is_served(self):
        servers = [self.redis_server() for _ in range(3)]
        args = [a for s in servers for a in ("-s", s.url())]
        holder = self.holder(["-k", "held"], global_args=args).wait_ready()
        _, address = self.start_exporter(args)
        servers[1].kill()
        # Told when the exporter next reads the servers: at once here, as the notices'
        # connection to it closed (a sweep begins).
        wait_until(lambda: sample(self.metrics(address), "redlock_server_up",
                                  server=f"127.0.0.1:{servers[1].port}") == 0, 10,
                   interval=0.1, message="the killed server to show 0")
        m = self.metrics(address)
        for s, up in zip(servers, (1, 0, 1)):
            self.assertEqual(sample(m, "redlock_server_up", server=f"127.0.0.1:{s.port}"), up)
        self.assertEqual(sample(m, "redlock_held", name="held"), 1)
        status, _, page = self.get(address, "/")
        self.assertEqual(status, 200)
        self.assertIn("2 of 3 servers answered", page)
        self.assertEqual(holder.release(), 0)

    def test_the_page_the_api_and_what_is_refused(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        holder = self.holder(["-k", "deploy"], global_args=args).wait_ready()
        # Another client's lock whose metadata is hostile: shown as text.
        server.command("SET", "lock:evil", "tok", "PX", "60000")
        server.command("HSET", "{lock:evil}:meta", "token", "tok", "host", "<img src=x>",
                       "pid", "1", "user", "u\"'&", "command", "<script>alert(1)</script>",
                       "acquired_at", "2026-01-01T00:00:00.000Z")
        _, address = self.start_exporter(args)
        status, headers, page = self.get(address, "/")
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/html"))
        self.assertIn("script-src 'self'", headers["Content-Security-Policy"])
        self.assertIn("<td>deploy</td><td>held</td>", page)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", page)
        self.assertIn("&lt;img src=x&gt;", page)
        self.assertIn("u&quot;&#39;&amp;", page)
        self.assertNotIn("<script>alert", page)
        self.assertNotIn("<img", page)
        status, headers, body = self.get(address, "/api/locks")
        self.assertEqual(status, 200)
        doc = json.loads(body)
        locks = {lock["name"]: lock for lock in doc["locks"]}
        self.assertEqual(locks["deploy"]["state"], "held")
        self.assertEqual(locks["deploy"]["holder"]["pid"], holder.proc.pid)
        self.assertEqual(locks["evil"]["holder"]["command"], "<script>alert(1)</script>")
        self.assertEqual(doc["servers"][0]["up"], True)
        # Read-only: nothing but GET and HEAD; nothing else than what it serves.
        self.assertEqual(self.get(address, "/", method="POST")[0], 405)
        self.assertEqual(self.get(address, "/", method="HEAD")[0], 200)
        self.assertEqual(self.get(address, "/nothing")[0], 404)
        self.assertEqual(self.get(address, "/page.js")[0], 200)
        self.assertEqual(holder.release(), 0)

    def test_the_documented_read_only_user_can_export_and_cannot_write(self):
        rules = documented_exporter_acl()
        self.assertIn("%R~lock:*", rules)
        if server_version() < (7, 0):
            # As redlock(1) says of Redis 6: no channel rules, EVALSHA and EVAL, and `~`.
            plain = {"+evalsha_ro": "+evalsha", "+eval_ro": "+eval"}
            rules = [plain.get(r, r.replace("%R~", "~")) for r in rules if r[0] != "&"]
        server = self.redis_server(acl_user=("exporter", "pw", " ".join(rules)))
        self.assertStatus(self.run_redlock(["-s", server.url(), "run", "-k", "job", "--",
                                            "true"]), 0)
        url = server.url(username="exporter", password="pw")
        _, address = self.start_exporter(["-s", url])
        m = self.metrics(address)
        self.assertEqual(sample(m, "redlock_runs_total", name="job", outcome="ran"), 1)
        # Followed live: a run after the start is counted.
        self.assertStatus(self.run_redlock(["-s", server.url(), "run", "-k", "job", "--",
                                            "true"]), 0)
        wait_until(lambda: sample(self.metrics(address), "redlock_runs_total", name="job",
                                  outcome="ran") == 2, 10, message="the second run counted")
        # A lock is not this user's to take.
        r = self.run_redlock(["-s", url, "run", "-k", "job", "--", "true"])
        self.assertStatus(r, 77)

    def test_an_address_that_cannot_be_listened_on_is_said(self):
        server = self.redis_server()
        _, address = self.start_exporter(["-s", server.url()])
        r = self.run_redlock(["-s", server.url(), "exporter", "--listen", address])
        self.assertStatus(r, 69)
        self.assertIn(f"cannot listen on {address}: Address already in use", r.stderr)
        r = self.run_redlock(["-s", server.url(), "exporter", "--listen", "nowhere"])
        self.assertStatus(r, 64)
        self.assertIn("invalid --listen 'nowhere'", r.stderr)


class ManyNamesTest(ExporterTest):
    """2,000 names (issue 47): every one served, series that say nothing absent (an outcome
    that never happened, the histogram of a name that never ran PROGRAM), the page and the
    API bounded to the locks worth a look first. Speed is bench/exporter-scale.sh's."""

    NAMES = 2000

    def test_two_thousand_names_are_served_and_silent_series_are_absent(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        # One name that ran, copied to 2,000 names (DUMP and RESTORE: whatever keys a run
        # leaves), one only refused, one held.
        self.assertStatus(self.run_redlock(args + ["run", "-k", "tpl", "--", "true"]), 0)
        server.command("EVAL", """
            local keys = redis.call("KEYS", "*tpl*")
            for i = 1, tonumber(ARGV[1]) do
              for _, k in ipairs(keys) do
                redis.call("RESTORE", string.gsub(k, "tpl", string.format("n%04d", i)),
                           math.max(redis.call("PTTL", k), 0), redis.call("DUMP", k), "REPLACE")
              end
            end""", "0", str(self.NAMES))
        server.command("DEL", *[k for k in server.command("KEYS", "*tpl*")])
        holder = self.holder(["-k", "busy"], global_args=args).wait_ready()
        self.assertStatus(self.run_redlock(args + ["run", "-k", "busy", "-n", "--", "true"]), 75)
        self.assertStatus(self.run_redlock(args + ["run", "-k", "refused", "--", "true"]), 0)
        server.command("DEL", "{lock:refused}:fence")
        server.command("HSET", "{lock:refused}:fence", "r:skipped-held", "2")
        _, address = self.start_exporter(args)
        m = self.metrics(address)
        names = [f"n{i:04d}" for i in range(1, self.NAMES + 1)]
        for name in names:
            self.assertEqual(sample(m, "redlock_runs_total", name=name, outcome="ran"), 1, name)
            self.assertEqual(sample(m, "redlock_run_duration_seconds_count", name=name), 1)
            self.assertEqual(sample(m, "redlock_held", name=name), 0)
        runs = {k: v for k, v in m.items() if k[0] == "redlock_runs_total"}
        self.assertNotIn(0, runs.values())
        self.assertEqual(len(runs), self.NAMES + 2)  # n*, busy's skipped-held, refused's
        self.assertEqual(sample(m, "redlock_runs_total", name="busy", outcome="skipped-held"), 1)
        self.assertEqual(sample(m, "redlock_held", name="busy"), 1)
        buckets = {k for k in m if k[0] == "redlock_run_duration_seconds_bucket"}
        self.assertEqual(len(buckets), 15 * self.NAMES)  # not busy's, not refused's
        # The page and the API: at most 1,000 locks, the held one among them.
        doc = json.loads(self.get(address, "/api/locks")[2])
        self.assertEqual(doc["total"], self.NAMES + 2)
        self.assertEqual(len(doc["locks"]), 1000)
        shown = [lock["name"] for lock in doc["locks"]]
        self.assertIn("busy", shown)
        self.assertEqual(shown, sorted(shown))
        page = self.get(address, "/")[2]
        self.assertIn(f"{self.NAMES + 2} locks (1000 shown: the held, overdue", page)
        self.assertEqual(page.count("<tr class="), 1000)
        self.assertEqual(holder.release(), 0)


class SweepTest(ExporterTest):
    def test_what_changes_without_a_notice_is_read_again_in_a_sweep(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        self.assertStatus(self.run_redlock(args + ["run", "-k", "job", "--", "true"]), 0)
        _, address = self.start_exporter(args)
        self.assertEqual(sample(self.metrics(address), "redlock_held", name="job"), 0)
        # Another client's lock, and counters written behind the exporter's back: no notice.
        server.command("SET", "lock:foreign", "tok", "PX", "600000")
        server.command("HINCRBY", "{lock:job}:fence", "r:ran", "5")
        wait_until(lambda: sample(self.metrics(address), "redlock_held", name="foreign") == 1,
                   20, interval=0.1, message="the foreign lock to be read in a sweep")
        self.assertEqual(sample(self.metrics(address), "redlock_runs_total", name="job",
                                outcome="ran"), 6)


class HalfRequestsTest(ExporterTest):
    """Idle half-requests (issue 46): 64 connections that sent half a request, and a byte
    now and then, held every connection slot; the library's timeout is an idle one, which
    the bytes reset, so every scrape, the page and /api/locks waited for good."""

    def setUp(self):
        super().setUp()
        server = self.redis_server()
        self.assertStatus(self.run_redlock(["-s", server.url(), "run", "-k", "job", "--",
                                            "true"]), 0)
        _, self.address = self.start_exporter(["-s", server.url()])

    def half_requests(self, n):
        """`n` connections that sent half a request and then a byte every half second."""
        host, port = self.address.split(":")
        socks = []
        for _ in range(n):
            s = socket.create_connection((host, int(port)), timeout=10 * SLACK)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
            self.addCleanup(s.close)
        stop = threading.Event()

        def trickle():
            while not stop.wait(0.5):
                for s in socks:
                    try:
                        s.send(b"X")
                    except OSError:
                        pass
        threading.Thread(target=trickle, daemon=True).start()
        self.addCleanup(stop.set)
        return socks

    def test_a_scrape_gets_in_past_idle_half_requests(self):
        self.half_requests(70)
        # Before: refused until the library's 30 s idle timeout, which the bytes reset.
        request = urllib.request.Request(f"http://{self.address}/metrics")
        with urllib.request.urlopen(request, timeout=4 * SLACK) as r:
            self.assertEqual(r.status, 200)
            self.assertIn('redlock_runs_total{name="job",outcome="ran"} 1', r.read().decode())
        self.assertEqual(self.get(self.address, "/api/locks")[0], 200)

    def test_a_half_request_that_trickles_is_closed_after_a_few_seconds(self):
        sock = self.half_requests(1)[0]
        sock.settimeout(15 * SLACK)
        try:
            closed = sock.recv(4096) == b""
        except ConnectionResetError:
            closed = True
        self.assertTrue(closed)


@unittest.skipIf(PROMTOOL is None, "promtool is not installed (scripts/setup.sh installs "
                 "the prometheus package)")
class AlertRulesTest(E2ETest):
    def test_every_shipped_alert_passes_its_promtool_unit_tests(self):
        rules = os.path.join(EXAMPLES, "redlock-alerts.yml")
        r = subprocess.run([PROMTOOL, "check", "rules", rules], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(rules) as f:
            alerts = re.findall(r"^\s+- alert: (\w+)$", f.read(), re.M)
        with open(os.path.join(EXAMPLES, "redlock-alerts.test.yml")) as f:
            tests = f.read()
        for alert in alerts:
            self.assertIn(f"alertname: {alert}", tests, f"{alert} has no test")
        r = subprocess.run([PROMTOOL, "test", "rules", "redlock-alerts.test.yml"],
                           cwd=EXAMPLES, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


@unittest.skipIf(PROMETHEUS is None, "prometheus is not installed (scripts/setup.sh installs "
                 "it)")
class PrometheusTest(ExporterTest):
    def test_a_real_prometheus_scrapes_the_exporter_and_answers_a_query(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        for _ in range(3):
            self.assertStatus(self.run_redlock(args + ["run", "-k", "nightly", "--", "true"]), 0)
        _, address = self.start_exporter(args)
        port = free_port()
        config = self.write_file("prometheus.yml", f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: redlock
    static_configs:
      - targets: ["{address}"]
""")
        log = open(self.path("prometheus.log"), "w")
        self.addCleanup(log.close)
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={self.mkdtemp('tsdb-')}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=log)
        self.addCleanup(lambda: (prometheus.kill(), prometheus.wait()))
        query = 'redlock_runs_total{name="nightly",outcome="ran"}'

        def value():
            url = (f"http://127.0.0.1:{port}/api/v1/query?" +
                   urllib.parse.urlencode({"query": query}))
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    result = json.load(r)["data"]["result"]
            except (OSError, ValueError):
                return None
            return float(result[0]["value"][1]) if result else None

        wait_until(lambda: value() == 3, 60, interval=0.5, message="prometheus to answer 3",
                   proc=None)
        self.assertStatus(self.run_redlock(args + ["run", "-k", "nightly", "--", "true"]), 0)
        wait_until(lambda: value() == 4, 60, interval=0.5, message="prometheus to answer 4")


@unittest.skipIf(CHROMIUM is None, "chromium is not installed (scripts/setup.sh installs it)")
class BrowserTest(ExporterTest):
    """The page in headless Chromium, driven over its DevTools protocol on a pipe."""

    def browser(self, url):
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # Chromium reads commands on fd 3 and writes replies on fd 4.
        log = open(self.path("chromium.log"), "w")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", f"--user-data-dir={self.mkdtemp('chromium-')}",
             "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=log, pass_fds=(3, 4), preexec_fn=lambda: (os.dup2(to_chrome_r, 3),
                                                 os.dup2(from_chrome_w, 4)))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.addCleanup(lambda: (proc.kill(), proc.wait()))
        out = os.fdopen(to_chrome_w, "wb")
        replies = os.fdopen(from_chrome_r, "rb")
        self.addCleanup(out.close)
        self.addCleanup(replies.close)
        state = {"id": 0, "buffer": b""}

        def call(method, params=None, session=None):
            state["id"] += 1
            message = {"id": state["id"], "method": method, "params": params or {}}
            if session:
                message["sessionId"] = session
            out.write(json.dumps(message).encode() + b"\0")
            out.flush()
            while True:
                while b"\0" not in state["buffer"]:
                    chunk = os.read(replies.fileno(), 65536)
                    if not chunk:
                        raise AssertionError("chromium closed its pipe; see chromium.log")
                    state["buffer"] += chunk
                raw, state["buffer"] = state["buffer"].split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == state["id"]:
                    if "error" in reply:
                        raise AssertionError(f"{method}: {reply['error']}")
                    return reply["result"]

        target = call("Target.createTarget", {"url": url})["targetId"]
        session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

        def evaluate(expression):
            result = call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                          session)
            return result["result"].get("value")

        return evaluate

    def test_the_page_lists_the_locks_shows_a_change_without_a_reload_and_escapes(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        holder = self.holder(["-k", "deploy"], global_args=args).wait_ready()
        server.command("SET", "lock:evil", "tok", "PX", "600000")
        server.command("HSET", "{lock:evil}:meta", "token", "tok", "host", "h", "pid", "1",
                       "user", "u", "command", "<script>window.pwned=1</script><img src=x "
                       "onerror=window.pwned=2>", "acquired_at", "2026-01-01T00:00:00.000Z")
        _, address = self.start_exporter(args)
        evaluate = self.browser(f"http://{address}/")
        wait_until(lambda: evaluate("document.readyState") == "complete" and
                   evaluate("location.href") == f"http://{address}/", 30,
                   message="the page to load")
        rows = lambda: evaluate(  # noqa: E731
            "Array.from(document.querySelectorAll('#locks tbody tr'))"
            ".map(r => Array.from(r.cells).map(c => c.textContent))")
        # Under load Chromium may answer once before the page's document is in place.
        wait_until(lambda: "deploy" in {row[0] for row in rows() or []}, 30,
                   message="the page to list the locks")
        names = {row[0]: row for row in rows()}
        self.assertEqual(names["deploy"][1], "held")
        self.assertIn("<script>window.pwned=1</script>", names["evil"][2])
        # Nothing of it ran, and no element came of it: the page's own script alone.
        self.assertIsNone(evaluate("window.pwned"))
        self.assertEqual(evaluate("document.querySelectorAll('script').length"), 1)
        self.assertEqual(evaluate("document.querySelectorAll('img').length"), 0)
        # A change shown without a reload: the marker set now is still there after it.
        evaluate("window.notReloaded = true")
        self.assertEqual(holder.release(), 0)
        wait_until(lambda: {r[0]: r for r in rows()}.get("deploy", [None, None])[1] == "free",
                   30, message="the page to show the release")
        self.assertTrue(evaluate("window.notReloaded"))
        self.assertIsNone(evaluate("window.pwned"))


if __name__ == "__main__":
    unittest.main()
