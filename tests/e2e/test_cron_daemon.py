"""`redlock cron FILE`, the daemon: every host runs the same crontab, each slot runs once.

Jobs here have a seconds field, so that slots come every second or two. Each daemon is a
host of its own: a UTS namespace with its own host name (`unshare --uts`, as root), or,
without root, the same host name for all (the tests that need several hosts are skipped).
Every job writes one line per run to a shared log (O_APPEND: whole lines), with the slot,
fence and host it saw; the tests read that log, the daemons' output and the history.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from redlock_e2e import (REDLOCK_BIN, SLACK, E2ETest, RedisServer, _die_with_parent,
                         captured_text, kill_quietly, redlock_pid, wait_until)
from test_exporter import ExporterTest
from test_monitoring import sample

CAN_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None


class CronDaemon:
    """`redlock -s URL... cron [ARGS] FILE` in the background, as host HOST (its own UTS
    namespace when the test runs as root), with stdout and stderr in files."""

    def __init__(self, test, crontab, host, servers, args=(), prefix=(), env=None):
        self.test = test
        self.host = host
        self.dir = tempfile.mkdtemp(prefix="cron-daemon-", dir=test.tmp)
        self._out = open(os.path.join(self.dir, "stdout"), "w+b")
        self._err = open(os.path.join(self.dir, "stderr"), "w+b")
        words = [REDLOCK_BIN] + [a for s in servers for a in ("-s", s.url())] + [
            "cron", *args, crontab]
        if CAN_UNSHARE:
            words = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host] + words
        words = list(prefix) + words
        environment = test.env()
        environment["ASAN_OPTIONS"] = (environment.get("ASAN_OPTIONS", "") +
                                       ":verify_asan_link_order=0").lstrip(":")
        environment.update(env or {})
        self.popen = subprocess.Popen(words, env=environment, cwd=test.tmp,
                                      stdin=subprocess.DEVNULL, stdout=self._out,
                                      stderr=self._err, preexec_fn=_die_with_parent)
        test.addCleanup(self.cleanup)

    @property
    def pid(self):
        """The daemon's pid: a prefix such as faketime forks it rather than exec it."""
        return redlock_pid(self.popen)

    @property
    def stdout(self):
        return captured_text(self._out)

    @property
    def stderr(self):
        return captured_text(self._err)

    def signal(self, sig):
        os.kill(self.pid, sig)

    def wait(self, timeout=30.0):
        try:
            return self.popen.wait(timeout * SLACK)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the daemon of {self.host} did not exit; stderr: "
                                 f"{self.stderr[-2000:]!r}") from None

    def alive(self):
        return self.popen.poll() is None

    def cleanup(self):
        if self.popen.poll() is None:
            pid = self.pid
            if pid != self.popen.pid:  # faketime's child: it would outlive faketime
                kill_quietly(pid)
            self.popen.kill()
            self.popen.wait()
        self._out.close()
        self._err.close()


class CronTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.log = self.path("runs.log")
        open(self.log, "w").close()

    def crontab(self, text, name="crontab"):
        return self.write_file(name, text, 0o644)

    def daemon(self, crontab, host="host-a", servers=None, args=(), prefix=(), env=None):
        return CronDaemon(self, crontab, host, servers or [self.server], args, prefix, env)

    def runs(self):
        """The log's lines, split into words."""
        with open(self.log) as f:
            return [line.split() for line in f if line.strip()]

    def slots(self, job=None):
        """{slot: [words...]} of the log's runs (of `job`: its first word)."""
        out = {}
        for words in self.runs():
            if job is None or words[0] == job:
                out.setdefault(words[1], []).append(words)
        return out

    def history(self, name, count=1000):
        r = self.run_redlock(["-s", self.server.url(), "history", name, "--json", "-n",
                              str(count)])
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["runs"]

    # A job line that logs JOB SLOT FENCE HOST, then runs `then` (sh).
    def job(self, schedule, name, then="", settings=""):
        log = self.log
        line = (f'echo "{name} $REDLOCK_SLOT $REDLOCK_FENCE $(hostname)" >> {log}'
                + (f"; {then}" if then else ""))
        head = f"# redlock: name={name}{' ' + settings if settings else ''}\n"
        return head + f"{schedule} {line}\n"


class TestOncePerSlot(CronTest):
    def test_three_daemons_run_each_slot_once(self):
        if not CAN_UNSHARE:
            self.skipTest("several hosts need root (unshare --uts)")
        tab = self.crontab(self.job("*/2 * * * * *", "tick", then="echo out-$REDLOCK_SLOT"))
        daemons = [self.daemon(tab, host) for host in ("host-a", "host-b", "host-c")]
        wait_until(lambda: len(self.slots("tick")) >= 5, 30, message="five slots run")
        for d in daemons:
            d.signal(signal.SIGTERM)
        for d in daemons:
            self.assertEqual(d.wait(), 0, d.stderr)
        slots = self.slots("tick")
        fences = []
        for slot, runs in sorted(slots.items()):
            self.assertEqual(len(runs), 1, f"slot {slot} ran {len(runs)} times: {runs}")
            self.assertRegex(slot, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d[02468]Z$")
            fences.append(int(runs[0][2]))
            self.assertIn(runs[0][3], ("host-a", "host-b", "host-c"))
        self.assertEqual(fences, sorted(fences), "fences grow with the slots")
        self.assertEqual(len(set(fences)), len(fences))
        # Each slot's output reached the daemon that ran it, with the job's name.
        outputs = "".join(d.stdout for d in daemons)
        for slot in slots:
            self.assertEqual(outputs.count(f"tick: out-{slot}\n"), 1, outputs)
        # The history has each slot's run, with its slot.
        recorded = [r for r in self.history("tick") if r["outcome"] == "ran"]
        self.assertTrue({r["slot"] for r in recorded} >= set(slots), recorded)

    def test_a_daemon_says_what_it_will_run_and_when(self):
        tab = self.crontab("CRON_TZ=Europe/Berlin\n" + self.job("0 30 2 * * *", "backup"))
        d = self.daemon(tab)
        wait_until(lambda: "backup" in d.stderr, 10, message="the listing")
        self.assertRegex(d.stderr, r"redlock: cron: backup: 0 30 2 \* \* \* \(Europe/Berlin\), "
                         r"next at \d{4}-\d\d-\d\dT0[01]:30:00Z \(\d{4}-\d\d-\d\dT02:30:00\+0[12]:00\)")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)

    def test_a_file_that_does_not_read_is_refused_at_the_start(self):
        tab = self.crontab("* * * * * * echo ok\n61 * * * * echo bad\n")
        d = self.daemon(tab)
        self.assertEqual(d.wait(), 78)
        self.assertIn("crontab:2:1: minute: 61 is out of range 0-59", d.stderr)


class TestOutput(CronTest):
    def test_json_lines_and_what_a_job_prints_cannot_break_them(self):
        # A long line, one without its newline at the end, bytes that are not UTF-8 and
        # control characters.
        # The crontab keeps backslashes as they are: the shell and printf read them.
        then = ("head -c 20000 /dev/zero | tr '\\0' x; echo; printf 'a\\033[2Jb\\r\\n'; "
                "printf '\\377\\376'; echo err >&2; printf 'tail'")
        tab = self.crontab(self.job("*/1 * * * * *", "noisy", then=then))
        d = self.daemon(tab, args=["--json"])
        wait_until(lambda: '"outcome":"ran"' in d.stdout, 30, message="a slot's line", proc=None)
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)
        objects = [json.loads(line) for line in d.stdout.splitlines()]
        slot_lines = [o for o in objects if "outcome" in o]
        first = slot_lines[0]
        self.assertEqual(set(first) - {"missed", "retry"},
                         {"job", "slot", "host", "fence", "outcome", "exit", "duration_ms"})
        self.assertEqual(first["outcome"], "ran")
        self.assertEqual(first["exit"], 0)
        self.assertGreaterEqual(first["fence"], 1)
        lines = [o for o in objects if o.get("slot") == first["slot"] and "line" in o]
        self.assertEqual([o["stream"] for o in lines if o["stream"] == "stderr"], ["stderr"])
        # The two streams are read apart: only each one's own order is kept.
        texts = [o["line"] for o in lines if o["stream"] == "stdout"]
        self.assertEqual(texts[0], "x" * 8192)  # cut into pieces, none lost
        self.assertEqual("".join(texts[:3]), "x" * 20000)
        self.assertIn("a\x1b[2Jb\r", texts)
        self.assertIn("\ufffd\ufffdtail", texts)

    def test_plain_lines_carry_the_jobs_name(self):
        tab = self.crontab(self.job("*/1 * * * * *", "noisy",
                                    then="printf 'a\\tb\\033c\\n'; echo oops >&2"))
        d = self.daemon(tab)
        wait_until(lambda: "noisy: oops" in d.stderr, 30, message="the job's stderr")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)
        self.assertIn("noisy: a\tb\\x1bc\n", d.stdout)
        self.assertRegex(d.stderr, r"redlock: cron: noisy \S+Z: ran on host-a \(fence \d+, "
                                   r"exit 0, ")


class TestReload(CronTest):
    def test_a_changed_file_reloads_and_a_broken_one_is_kept_out(self):
        tab = self.crontab(self.job("*/1 * * * * *", "first"))
        d = self.daemon(tab)
        wait_until(lambda: self.slots("first"), 30, message="the first job")
        # An editor's way: a new file renamed over the old one.
        new = self.crontab(self.job("*/1 * * * * *", "first") +
                           self.job("*/1 * * * * *", "second"), name="crontab.new")
        os.rename(new, tab)
        wait_until(lambda: self.slots("second"), 30, message="the job added")
        self.assertIn("redlock: cron: " + tab + " (the file changed): 2 jobs, 1 new, 0 gone",
                      d.stderr)
        # A broken file is said and kept out: both jobs go on.
        with open(tab, "a") as f:
            f.write("* * * bogus\n")
        wait_until(lambda: "keeping the 2 jobs read before" in d.stderr, 30,
                   message="the refusal")
        self.assertIn(f"{tab}:5:", d.stderr)
        seen = len(self.slots("second"))
        d.signal(signal.SIGHUP)
        wait_until(lambda: len(self.slots("second")) > seen + 1, 30,
                   message="the jobs to go on")
        self.assertEqual(d.stderr.count("keeping the 2 jobs read before"), 1, d.stderr)
        # Fixed and sent SIGHUP: read again, the first job gone.
        with open(tab, "w") as f:
            f.write(self.job("*/1 * * * * *", "second"))
        d.signal(signal.SIGHUP)
        wait_until(lambda: "1 job, 0 new, 1 gone" in d.stderr, 30, message="the reload")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)


class TestDrain(CronTest):
    def test_sigterm_lets_a_run_finish_within_the_grace(self):
        tab = self.crontab(self.job("*/2 * * * * *", "slow", then="sleep 2; echo finished"))
        d = self.daemon(tab, args=["--grace", "20s"])
        wait_until(lambda: self.slots("slow"), 30, message="a run to start")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)
        # Every run that started its command finished it (a slot more may have begun
        # before the SIGTERM on a slow machine: its run is stopped or finishes too).
        started = len(self.slots("slow"))
        self.assertGreaterEqual(started, 1)
        self.assertEqual(d.stdout.count("slow: finished"), started, d.stdout)
        self.assertRegex(d.stderr, r"redlock: cron: SIGTERM: no new slots; \d runs? finishing")
        self.assertNotIn("killed", d.stderr)

    def test_a_run_whose_slot_is_undecided_is_stopped_and_says_so(self):
        # The server frozen: a slot's run keeps trying to decide it. The drain stops that
        # run at once, and its line says it did not run, not that it was killed.
        tab = self.crontab(self.job("*/1 * * * * *", "later"))
        d = self.daemon(tab, args=["--grace", "20s"])
        wait_until(lambda: self.slots("later"), 30, message="a first run", proc=None)
        self.server.freeze()
        self.addCleanup(self.server.thaw)
        time.sleep(1.5)  # a slot's instant passes: its run cannot decide it
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)
        self.server.thaw()
        self.assertRegex(d.stderr, r"later \S+Z: interrupted before the slot was decided: "
                                   r"not run here")
        self.assertNotIn("killed", d.stderr)

    def test_past_the_grace_a_run_is_stopped_and_its_slot_interrupted(self):
        tab = self.crontab(self.job("*/2 * * * * *", "stuck", then="sleep 60"))
        d = self.daemon(tab, args=["--grace", "500ms"])
        wait_until(lambda: self.slots("stuck"), 30, message="a run to start")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)
        slot = next(iter(self.slots("stuck")))
        entries = [r for r in self.history("stuck") if r.get("slot") == slot]
        self.assertEqual([r["outcome"] for r in entries], ["interrupted"], entries)


class TestCatchUp(CronTest):
    def test_a_slot_no_host_ran_is_run_at_the_start_within_its_window(self):
        # Once a minute, at second 0: when the daemon starts, that slot has passed with no
        # host up, and is within the default catch-up window.
        tab = self.crontab(self.job("0 * * * * *", "minutely"))
        d = self.daemon(tab)
        wait_until(lambda: self.slots("minutely"), 30, message="the slot caught up")
        slot = next(iter(self.slots("minutely")))
        self.assertRegex(slot, r":00Z$")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)
        # Started again: the slot is run already, not a second time.
        d = self.daemon(tab, host="host-b")
        wait_until(lambda: "minutely" in d.stderr, 10, message="the listing")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)
        self.assertEqual(len(self.slots("minutely")[slot]), 1)

    def test_slots_missed_while_no_host_ran_are_recorded_once(self):
        tab = self.crontab(self.job("*/1 * * * * *", "often"))
        d = self.daemon(tab)
        wait_until(lambda: len(self.slots("often")) >= 2, 30, message="two slots")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)
        last = max(self.slots("often"))
        time.sleep(3.5)  # three or four slots with no host
        d = self.daemon(tab, host="host-b")
        wait_until(lambda: len([s for s in self.slots("often") if s > last]) >= 2, 30,
                   message="slots after the gap")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)
        ran = set(self.slots("often"))
        missed = [r["slot"] for r in self.history("often") if r["outcome"] == "missed"]
        self.assertGreaterEqual(len(missed), 2, missed)
        self.assertEqual(len(missed), len(set(missed)), "each missed slot once")
        self.assertFalse(set(missed) & ran, "a slot run is not missed")
        self.assertTrue(all(m > last for m in missed))


class TestFailover(CronTest):
    def test_an_at_least_once_slot_runs_again_on_another_host(self):
        if not CAN_UNSHARE:
            self.skipTest("several hosts need root (unshare --uts)")
        # The first run of a slot writes its run's pid ($PPID: the slot's redlock) and
        # sleeps; the test kills that redlock; the other host runs the slot again.
        then = ('echo "$PPID" > ' + self.path("pid") + '.tmp.$(hostname); mv ' + self.path("pid")
                + '.tmp.$(hostname) ' + self.path("pid") + '.$(hostname); sleep 30')
        tab = self.crontab(self.job("*/30 * * * * *", "important", then=then,
                                    settings="at-least-once"))
        a = self.daemon(tab, "host-a")
        b = self.daemon(tab, "host-b")
        wait_until(lambda: self.slots("important"), 40, message="a first run")
        (slot, [first]), = self.slots("important").items()
        pid_file = self.path("pid") + "." + first[3]
        wait_until(lambda: os.path.exists(pid_file), 10, message="the run's pid")
        with open(pid_file) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        wait_until(lambda: len(self.slots("important").get(slot, [])) == 2, 20,
                   message="the slot run again")
        second = self.slots("important")[slot][1]
        self.assertNotEqual(second[3], first[3])
        self.assertGreater(int(second[2]), int(first[2]), "a larger fence")
        outcomes = [r["outcome"] for r in self.history("important") if r.get("slot") == slot]
        self.assertIn("killed", outcomes)
        for d in (a, b):
            d.signal(signal.SIGTERM)
            d.signal(signal.SIGTERM)  # no grace: the second run is stopped
        for d in (a, b):
            self.assertEqual(d.wait(), 0)

    def test_an_at_most_once_slot_whose_run_died_is_not_run_again(self):
        # Written whole (a rename), so that the test never reads it half written.
        then = ('echo "$PPID" > ' + self.path("pid.tmp") + '; mv ' + self.path("pid.tmp") + ' '
                + self.path("pid") + '; sleep 30')
        tab = self.crontab(self.job("*/30 * * * * *", "once", then=then))
        a = self.daemon(tab, "host-a")
        b = self.daemon(tab, "host-b")
        wait_until(lambda: os.path.exists(self.path("pid")), 40, message="a first run")
        with open(self.path("pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        (slot, runs), = self.slots("once").items()
        wait_until(lambda: any(r["outcome"] == "killed" for r in self.history("once")), 20,
                   message="the killed run recorded")
        time.sleep(1)
        self.assertEqual(len(self.slots("once")[slot]), 1)
        for d in (a, b):
            d.signal(signal.SIGTERM)
            self.assertEqual(d.wait(), 0)


class TestOverlap(CronTest):
    def outcomes(self, name):
        return [(r.get("slot"), r["outcome"]) for r in self.history(name)]

    def test_skip_records_each_slot_skipped_once(self):
        tab = self.crontab(self.job("*/1 * * * * *", "long", then="sleep 3.5"))
        daemons = [self.daemon(tab, h) for h in ("host-a", "host-b")]
        wait_until(lambda: sum(1 for _, o in self.outcomes("long") if o == "skipped-overlap") >= 3,
                   30, message="slots skipped")
        for d in daemons:
            d.signal(signal.SIGTERM)
            d.signal(signal.SIGTERM)
        for d in daemons:
            self.assertEqual(d.wait(), 0)
        skipped = [s for s, o in self.outcomes("long") if o == "skipped-overlap"]
        self.assertEqual(len(skipped), len(set(skipped)), skipped)
        self.assertFalse(set(skipped) & set(self.slots("long")))

    def test_queue_runs_one_waiting_slot_after_the_run(self):
        then = (f'echo "times $REDLOCK_SLOT $(date +%s.%N)" >> {self.log}; sleep 3; '
                f'echo "ends $REDLOCK_SLOT $(date +%s.%N)" >> {self.log}')
        tab = self.crontab(self.job("*/2 * * * * *", "queued", then=then,
                                    settings="overlap=queue"))
        d = self.daemon(tab)
        wait_until(lambda: len(self.slots("ends")) >= 3, 40, message="three runs")
        d.signal(signal.SIGTERM)
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)
        starts = {slot: float(w[0][2]) for slot, w in self.slots("times").items()}
        ends = {slot: float(w[0][2]) for slot, w in self.slots("ends").items()}
        ran = sorted(ends)
        # Runs of 3 s every 2 s: the slot after a run waits for its end and then runs
        # (under skip, it would not run at all), never beside it...
        for before, after in zip(ran, ran[1:]):
            self.assertGreaterEqual(starts[after], ends[before], (before, after))
        self.assertIn(2, [instant(b) - instant(a) for a, b in zip(ran, ran[1:])], ran)
        self.assertTrue(any(starts[s] >= instant(s) + 0.5 for s in ran), starts)
        # ... and while one waits, the next is skipped: one slot waits at a time.
        skipped = {r["slot"] for r in self.history("queued") if r["outcome"] == "skipped-overlap"}
        self.assertTrue(skipped, self.history("queued"))
        self.assertFalse(skipped & set(self.slots("queued")))

    def test_replace_stops_the_running_one(self):
        tab = self.crontab(self.job("*/2 * * * * *", "fresh", then="sleep 30",
                                    settings="overlap=replace"))
        d = self.daemon(tab)
        wait_until(lambda: len(self.slots("fresh")) >= 2, 30, message="a second run")
        wait_until(lambda: any(o == "force-released" for _, o in self.outcomes("fresh")), 20,
                   message="the first run replaced")
        d.signal(signal.SIGTERM)
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)


class TestPerJob(CronTest):
    def test_timeout_stops_a_run_with_124(self):
        tab = self.crontab(self.job("*/2 * * * * *", "slowpoke", then="sleep 30",
                                    settings="timeout=500ms"))
        d = self.daemon(tab, args=["--json"])
        wait_until(lambda: '"outcome":"max-hold"' in d.stdout, 30, message="a timeout")
        d.signal(signal.SIGTERM)
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)
        line = next(json.loads(l) for l in d.stdout.splitlines() if '"max-hold"' in l)
        self.assertEqual(line["exit"], 124)

    def test_environment_and_directory(self):
        workdir = self.mkdtemp("work-")
        tab = self.crontab(f"GREETING='hello there'\n" + self.job(
            "*/1 * * * * *", "env", then=f'echo "$GREETING|$(pwd)" > {self.path("env.out")}',
            settings=f"dir={workdir}"))
        d = self.daemon(tab)
        wait_until(lambda: os.path.exists(self.path("env.out")), 30, message="the job")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)
        with open(self.path("env.out")) as f:
            self.assertEqual(f.read(), f"hello there|{workdir}\n")

    def test_jitter_is_the_same_on_every_host(self):
        if not CAN_UNSHARE:
            self.skipTest("several hosts need root (unshare --uts)")
        tab = self.crontab(self.job("*/2 * * * * *", "spread", settings="jitter=1500ms"))
        daemons = [self.daemon(tab, h) for h in ("host-a", "host-b")]
        wait_until(lambda: len(self.slots("spread")) >= 4, 30, message="four slots")
        for d in daemons:
            d.signal(signal.SIGTERM)
        for d in daemons:
            self.assertEqual(d.wait(), 0)
        for slot, runs in self.slots("spread").items():
            self.assertEqual(len(runs), 1, runs)


class TestServersAway(CronTest):
    def test_a_slot_its_servers_did_not_answer_at_its_instant_runs_once_they_do(self):
        # The server frozen from just before a slot's instant until 1.5 s after it: that
        # slot's run tries again (not "failed (exit 69)") and runs it, once.
        tab = self.crontab(self.job("*/4 * * * * *", "patient"))
        d = self.daemon(tab)
        wait_until(lambda: self.slots("patient"), 30, message="a first run", proc=None)
        now = time.time()
        instant = (int(now) // 4 + 1) * 4
        if instant - now < 1.0:
            instant += 4
        time.sleep(instant - now - 0.5)
        self.server.freeze()
        time.sleep(2.0)
        self.server.thaw()
        slot = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(instant))
        wait_until(lambda: slot in self.slots("patient"), 30, proc=None,
                   message=f"the run of {slot}; stderr: {d.stderr[-1500:]}")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)
        self.assertEqual(len(self.slots("patient")[slot]), 1)
        self.assertNotIn(f"patient {slot}: failed", d.stderr)
        self.assertRegex(d.stderr, rf"patient {slot}: ran on host-a \(fence \d+, exit 0, ")


class TestClocks(CronTest):
    def test_a_host_whose_clock_runs_ahead_waits_for_the_servers(self):
        if not shutil.which("faketime"):
            self.skipTest("faketime is not installed (scripts/setup.sh installs it)")
        # The job records the servers' clock when it starts: never before its slot.
        port = self.server.address[1]
        # (redis-cli without faketime's preload: it hangs in libfaketime's clock_gettime.)
        then = (f"env -u LD_PRELOAD -u FAKETIME redis-cli -p {port} TIME | head -1 > "
                f"{self.path('time')}.$REDLOCK_SLOT")
        tab = self.crontab(self.job("*/2 * * * * *", "punctual", then=then))
        d = self.daemon(tab, prefix=["faketime", "-f", "+30s"])
        wait_until(lambda: len(self.slots("punctual")) >= 2, 60, message="two slots")
        d.signal(signal.SIGTERM)  # within the grace: the runs under way write their time
        self.assertEqual(d.wait(), 0)
        import datetime
        for slot in self.slots("punctual"):
            instant = datetime.datetime.strptime(slot, "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=datetime.timezone.utc).timestamp()
            with open(f"{self.path('time')}.{slot}") as f:
                self.assertGreaterEqual(int(f.read()), instant, slot)


def instant(slot):
    """A slot's text (2026-03-29T01:00:00Z) as Unix seconds."""
    import datetime
    return datetime.datetime.strptime(slot, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


class TestOnTheServers(CronTest):
    def test_a_job_leaves_its_record_alone_kept_as_long_as_its_slots_need(self):
        # A history age (1 min) far shorter than the catch-up window (1 h by default): the
        # record, which holds the slot's record, is kept the window, the next fire (2 s) and
        # ten minutes (70 min), not the age (64 s), nor forever; and no key of its own. Runs
        # that hold a sixteenth of the age (4 s) and the slots they skip write the record's
        # expiry again after the claim did (as would a host that loses a slot).
        config = self.write_file("short-age.toml", 'history_max_age = "1m"\n')
        tab = self.crontab(self.job("*/2 * * * * *", "tick", then="sleep 4"))
        d = self.daemon(tab, env={"REDLOCK_CONFIG": config})
        wait_until(lambda: any(r["outcome"] == "ran" for r in self.history("tick")), 30,
                   message="a run ended")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)
        wait_until(lambda: self.server.command("KEYS", "*tick*") == ["{lock:tick}:fence"], 10,
                   message=f"only the record left: {self.server.command('KEYS', '*')}")
        pttl = self.server.command("PTTL", "{lock:tick}:fence")
        self.assertGreater(pttl, 3600 * 1000)
        self.assertLessEqual(pttl, 70 * 60 * 1000 + 5000)
        self.assertEqual(self.server.command("HGET", "{lock:tick}:fence", "cw"), "*/2 * * * * *")


    def test_a_killed_runs_release_keeps_the_record_as_long_as_its_slot_needs(self):
        # The run's redlock killed: its releaser records the run (killed) and, with a
        # history age of 1 min, must keep the record the slot's window (1 h), as the run
        # would have, not cut it to the age: else the slot could be claimed again. (The
        # run holds the lock 5 s first: an entry of a run held a sixteenth of the age, 4 s,
        # sets the record's expiry.)
        config = self.write_file("short-age.toml", 'history_max_age = "1m"\n')
        then = ('sleep 5; echo "$PPID" > ' + self.path("pid.tmp") + '; mv '
                + self.path("pid.tmp") + ' ' + self.path("pid") + '; sleep 30')
        tab = self.crontab(self.job("*/30 * * * * *", "once", then=then))
        d = self.daemon(tab, env={"REDLOCK_CONFIG": config})
        wait_until(lambda: os.path.exists(self.path("pid")), 40, message="a first run")
        with open(self.path("pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        wait_until(lambda: any(r["outcome"] == "killed" for r in self.history("once")), 20,
                   message="the killed run recorded")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)
        pttl = self.server.command("PTTL", "{lock:once}:fence")
        self.assertGreater(pttl, 3600 * 1000)


class TestSeenFromTheFleet(CronTest, ExporterTest):
    def test_the_exporter_serves_each_jobs_schedule_next_fire_and_outcomes(self):
        tab = self.crontab("CRON_TZ=Europe/Berlin\n" + self.job("*/2 * * * * *", "tick"))
        d = self.daemon(tab)
        wait_until(lambda: len(self.slots("tick")) >= 2, 30, message="two slots")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0, d.stderr)
        ran = [r for r in self.history("tick") if r["outcome"] == "ran"]
        latest = max(instant(r["slot"]) for r in ran)
        _, address = self.start_exporter(["-s", self.server.url()])
        m = self.metrics(address)
        # The latest slot claimed (a drain may have claimed one more than ran to its end),
        # and the fire after it.
        slot = sample(m, "redlock_cron_slot_timestamp_seconds", name="tick")
        self.assertIn(slot, (latest, latest + 2))
        self.assertEqual(sample(m, "redlock_cron_next_fire_timestamp_seconds", name="tick"),
                         slot + 2)
        self.assertEqual(sample(m, "redlock_cron_info", name="tick", schedule="*/2 * * * * *",
                                zone="Europe/Berlin"), 1)
        self.assertEqual(sample(m, "redlock_runs_total", name="tick", outcome="ran"), len(ran))
        self.assertGreaterEqual(sample(m, "redlock_last_success_timestamp_seconds", name="tick"),
                                latest)
        # A name that is no cron job has none of these.
        self.assertStatus(self.run_redlock(["-s", self.server.url(), "run", "-k", "plain",
                                            "--", "true"]), 0)
        m = self.metrics(address)
        self.assertIsNone(sample(m, "redlock_cron_next_fire_timestamp_seconds", name="plain"))
        locks = {lock["name"]: lock
                 for lock in json.loads(self.get(address, "/api/locks")[2])["locks"]}
        self.assertIsNone(locks["plain"]["cron"])
        cron = locks["tick"]["cron"]
        self.assertEqual((cron["schedule"], cron["zone"]), ("*/2 * * * * *", "Europe/Berlin"))
        self.assertEqual(instant(cron["next_fire_at"][:19] + "Z"), slot + 2)
        page = self.get(address, "/")[2]
        self.assertIn("*/2 * * * * * (Europe/Berlin), next ", page)


if __name__ == "__main__":
    import unittest
    unittest.main()
