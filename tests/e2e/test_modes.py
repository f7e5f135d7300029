"""Modes of run: --max-hold, --min-validity,
--min-hold, --once-per, --limit, nested runs."""

import json
import os
import shutil
import subprocess
import time
import unittest

from redlock_e2e import (HOLDER_SCRIPT, REDLOCK_BIN, SLACK, E2ETest, pid_alive,
                         read_pid_file, run_in_holder_script, wait_until)


class MaxHoldTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def run_held(self, *args, timeout=30):
        return self.run_redlock(["-s", self.url, "run", "-k", "mh", *args], timeout=timeout)

    def test_a_program_that_runs_too_long_is_stopped_and_run_exits_124(self):
        pid_file = self.path("pid")
        started = time.monotonic()
        r = self.run_held("--max-hold", "500ms", "--", "sh", "-c",
                          'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 30', "sh",
                          pid_file)
        took = time.monotonic() - started
        self.assertStatus(r, 124)
        self.assertIn("PROGRAM ran for 500ms (--max-hold); stopping it", r.stderr)
        self.assertMessages(r.stderr)
        self.assertFalse(pid_alive(read_pid_file(pid_file)))
        self.assertLess(took, 20 * SLACK)  # not the program's 30 s
        self.assertKeyGone(self.server, "lock:mh")

    def test_a_program_that_ignores_term_is_killed_after_the_grace(self):
        # -t 1s: the grace is a third of it; KILL follows TERM by that.
        r = self.run_held("-t", "1s", "--max-hold", "300ms", "--", "sh", "-c",
                          'trap "" TERM; sleep 30 & wait; wait')
        self.assertStatus(r, 124)
        self.assertKeyGone(self.server, "lock:mh")

    def test_the_lease_is_renewed_until_the_program_is_stopped(self):
        # Held past several TTLs: the lock holds our token all along.
        tokens = self.path("tokens")
        r = self.run_held("-t", "300ms", "--max-hold", "1500ms", "--", "sh", "-c",
                          'while :; do redis-cli -p "$1" GET lock:mh >> "$2"; sleep 0.1; done',
                          "sh", str(self.server.port), tokens)
        self.assertStatus(r, 124)
        with open(tokens) as f:
            seen = [line.strip() for line in f if line.strip()]
        self.assertGreater(len(seen), 5, seen)
        self.assertEqual(len(set(seen)), 1, seen)  # one token, never lost or gone
        self.assertRegex(seen[0], r"^[0-9a-f]{32}$")

    def test_a_program_that_ends_in_time_keeps_its_own_status(self):
        r = self.run_held("--max-hold", "10s", "--", "sh", "-c", "exit 3")
        self.assertStatus(r, 3)
        self.assertEqual(r.stderr, "")

    def test_bad_values_are_usage_errors(self):
        for value in ("0", "-1s", "soon", ""):
            with self.subTest(value=value):
                r = self.run_held(f"--max-hold={value}", "--", "true")
                self.assertStatus(r, 64)
                self.assertMessages(r.stderr)


class MinValidityTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()

    def test_too_little_validity_left_is_not_acquired_and_the_lock_is_released(self):
        # 150 ms each way: an acquisition takes at least 300 ms of a 1 s lease.
        proxy = self.delay_proxy(self.server, 0.15)
        marker = self.path("ran")
        for wait in (["-n"], ["-w", "1s"]):
            with self.subTest(wait=wait):
                r = self.run_redlock(["-s", proxy.url(), "run", "-k", "mv", "-t", "1s",
                                      "--min-validity", "900ms", *wait, "--", "touch", marker],
                                     timeout=30)
                self.assertStatus(r, 75)
                self.assertIn("was not acquired with at least 900ms of validity left", r.stderr)
                self.assertFalse(os.path.exists(marker))
                self.assertKeyGone(self.server, "lock:mv")
        # -E applies as to any lock not acquired.
        r = self.run_redlock(["-s", proxy.url(), "run", "-k", "mv", "-t", "1s",
                              "--min-validity", "900ms", "-n", "-E", "3", "--", "true"])
        self.assertStatus(r, 3)

    def test_enough_validity_left_runs_program(self):
        r = self.run_redlock(["-s", self.server.url(), "run", "-k", "mv", "-t", "10s",
                              "--min-validity", "5s", "--", "sh", "-c", "exit 4"])
        self.assertStatus(r, 4)

    def test_the_configs_min_validity_is_the_default_and_0_turns_it_off(self):
        proxy = self.delay_proxy(self.server, 0.15)
        config = self.write_file("config.toml", 'min_validity = "900ms"\n')
        marker = self.path("ran")
        args = ["-c", config, "-s", proxy.url(), "run", "-k", "mv", "-t", "1s", "-n"]
        r = self.run_redlock([*args, "--", "touch", marker], timeout=30)
        self.assertStatus(r, 75)
        self.assertFalse(os.path.exists(marker))
        r = self.run_redlock([*args, "--min-validity", "0", "--", "touch", marker], timeout=30)
        self.assertStatus(r, 0)
        self.assertTrue(os.path.exists(marker))
        # One the ttl cannot give names the file it came from.
        r = self.run_redlock(["-c", config, "-s", self.server.url(), "run", "-k", "mv", "-t",
                              "500ms", "--", "true"])
        self.assertStatus(r, 64)
        self.assertIn(f"min_validity in {config}", r.stderr)

    def test_a_min_validity_the_ttl_cannot_give_is_a_usage_error(self):
        for args in (["-t", "1s", "--min-validity", "1s"], ["--min-validity", "30s"],
                     ["--min-validity", "soon"]):
            with self.subTest(args=args):
                r = self.run_redlock(["-s", self.server.url(), "run", "-k", "mv", *args, "--",
                                      "true"])
                self.assertStatus(r, 64)
                self.assertMessages(r.stderr)


class MinHoldTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def test_a_short_program_leaves_the_lock_held_for_the_rest_of_min_hold(self):
        # The cron case: host B, a little late, must not run the slot's job again.
        # Long enough for the late run to start within it, however slow the build.
        hold_ms = int(2000 * SLACK)
        r = self.run_redlock(["-s", self.url, "run", "-k", "slot", "--min-hold",
                              f"{hold_ms}ms", "--", "true"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        pttl = int(self.server.command("PTTL", "lock:slot"))
        self.assertGreater(pttl, 0)
        self.assertLessEqual(pttl, hold_ms)
        late = self.run_redlock(["-s", self.url, "run", "-k", "slot", "-n", "--", "true"])
        self.assertStatus(late, 75)
        # Then it simply expires, and the lock is free again.
        wait_until(lambda: self.server.command("EXISTS", "lock:slot") == 0, 10,
                   message="the lock to expire")
        r = self.run_redlock(["-s", self.url, "run", "-k", "slot", "-n", "--", "true"])
        self.assertStatus(r, 0)

    def test_a_program_longer_than_min_hold_is_released_at_its_end(self):
        r = self.run_redlock(["-s", self.url, "run", "-k", "long", "--min-hold", "200ms", "--",
                              "sleep", "0.5"])
        self.assertStatus(r, 0)
        self.assertEqual(self.server.command("EXISTS", "lock:long"), 0)

    def test_program_status_is_kept(self):
        r = self.run_redlock(["-s", self.url, "run", "-k", "st", "--min-hold", "1s", "--",
                              "sh", "-c", "exit 5"])
        self.assertStatus(r, 5)


# PROGRAM of the outer run: records its fence, runs the inner `redlock run -n` of the same
# NAME (which would exit 75 if it tried to take the lock), then records the inner status
# and the lock's token on the first server once the inner run is over.
NESTED_OUTER = r'''
d=$1; shift
printf '%s' "$REDLOCK_FENCE" > "$d/outer-fence"
printf '%s' "$REDLOCK_TOKEN" > "$d/outer-token"
"$@" sh -c 'printf "%s" "$REDLOCK_FENCE" > "$1/inner-fence"; exit 7' sh "$d"
echo $? > "$d/inner-status"
redis-cli -p "$PORT" GET lock:nest > "$d/token-after"
'''


class ServersTest(E2ETest):
    """`servers` redis-servers (one; a subclass says five), as -s options in global_args."""

    servers = 1

    def setUp(self):
        super().setUp()
        self.redis = [self.redis_server() for _ in range(self.servers)]
        self.global_args = [a for s in self.redis for a in ("-s", s.url())]


class NestedRunTest(ServersTest):

    def read(self, name):
        with open(self.path(name)) as f:
            return f.read().strip()

    def test_a_run_inside_a_run_of_the_same_name_runs_under_the_outer_lock(self):
        inner = [REDLOCK_BIN, *self.global_args, "run", "-k", "nest", "-n", "--"]
        env = self.env({"PORT": str(self.redis[0].port)})
        r = self.run_redlock([*self.global_args, "run", "-k", "nest", "--", "sh", "-c",
                              NESTED_OUTER, "sh", self.tmp, *inner], env=env)
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        self.assertEqual(self.read("inner-status"), "7")  # PROGRAM's own status, not 75
        self.assertEqual(self.read("inner-fence"), self.read("outer-fence"))
        # The inner run released nothing: the outer token still held the lock after it.
        self.assertEqual(self.read("token-after"), self.read("outer-token"))
        for server in self.redis:
            self.assertKeyGone(server, "lock:nest")

    def test_a_token_that_no_longer_holds_the_lock_is_an_ordinary_run(self):
        r = self.run_redlock([*self.global_args, "run", "-k", "nest", "--", "sh", "-c",
                              'env | grep ^REDLOCK_ > "$1"', "sh", self.path("env")])
        self.assertStatus(r, 0)
        stale = dict(line.split("=", 1) for line in self.read("env").splitlines())
        r = self.run_redlock([*self.global_args, "-v", "run", "-k", "nest", "-n", "--", "sh",
                              "-c", 'printf "%s %s" "$REDLOCK_TOKEN" "$REDLOCK_FENCE" > "$1"',
                              "sh", self.path("second")], env=self.env(stale))
        self.assertStatus(r, 0)
        self.assertIn("the REDLOCK_TOKEN inherited does not hold it on these servers (free)",
                      r.stderr)
        token, fence = self.read("second").split()
        self.assertNotEqual(token, stale["REDLOCK_TOKEN"])
        self.assertGreater(int(fence), int(stale["REDLOCK_FENCE"]))
        for server in self.redis:
            self.assertKeyGone(server, "lock:nest")

    def test_a_forged_or_foreign_token_never_gets_in(self):
        holder = self.holder(["-k", "nest"], global_args=self.global_args).wait_ready()
        marker = self.path("ran")
        forged = [
            {"REDLOCK_KEY": "nest", "REDLOCK_TOKEN": "0123456789abcdef0123456789abcdef"},
            {"REDLOCK_KEY": "nest", "REDLOCK_TOKEN": holder.token.upper()},
            {"REDLOCK_KEY": "other", "REDLOCK_TOKEN": holder.token},  # another lock's
            {"REDLOCK_KEY": "nest", "REDLOCK_TOKEN": ""},
            # The holder's true token, copied out of its tree (status used to print it).
            {"REDLOCK_KEY": "nest", "REDLOCK_TOKEN": holder.token},
            {"REDLOCK_KEY": "nest", "REDLOCK_TOKEN": holder.token,
             "REDLOCK_FENCE": str(holder.fence)},
        ]
        for extra in forged:
            with self.subTest(env=extra):
                r = self.run_redlock([*self.global_args, "run", "-k", "nest", "-n", "--",
                                      "touch", marker], env=self.env(extra))
                self.assertStatus(r, 75)
                self.assertFalse(os.path.exists(marker))
        # The true token from another lock server set (here: none of ours) is not trusted
        # either: another server holds nothing under it.
        other = self.redis_server()
        r = self.run_redlock(["-s", other.url(), "run", "-k", "nest", "-n", "--", "sh", "-c",
                              'printf "%s" "$REDLOCK_TOKEN" > "$1"', "sh", marker],
                             env=self.env({"REDLOCK_KEY": "nest",
                                           "REDLOCK_TOKEN": holder.token}))
        self.assertStatus(r, 0)
        self.assertNotEqual(self.read("ran"), holder.token)
        self.assertEqual(holder.release(), 0)

    def test_a_counter_raised_by_a_lost_attempt_changes_neither_the_fence_nor_status(self):
        # An attempt that wins a minority of the servers increments their counters, and
        # loses. The holder's fence is what its metadata records on a majority: the one a
        # nested run must inherit, and the one status shows.
        holder = self.holder(["-k", "nest"], global_args=self.global_args).wait_ready()
        for server in self.redis[:max(1, len(self.redis) // 2)]:
            server.command("HINCRBY", "{lock:nest}:fence", "f", "100")
        r = self.run_redlock([*self.global_args, "status", "--json", "nest"])
        self.assertStatus(r, 0)
        self.assertEqual(json.loads(r.stdout)["locks"][0]["fence"], holder.fence)
        r = holder.run_inside([*self.global_args, "run", "-k", "nest", "-n", "--", "sh", "-c",
                               'printf "%s" "$REDLOCK_FENCE"'])
        self.assertStatus(r, 0)
        self.assertEqual(int(r.stdout), holder.fence)
        self.assertEqual(holder.release(), 0)

    def test_an_unknown_program_in_a_nested_run_is_127(self):
        inner = [REDLOCK_BIN, *self.global_args, "run", "-k", "nest", "--"]
        r = self.run_redlock([*self.global_args, "run", "-k", "nest", "--", *inner,
                              "no-such-program-x"])
        self.assertStatus(r, 127)
        self.assertIn("cannot run 'no-such-program-x'", r.stderr)


class NestedRunFiveServersTest(NestedRunTest):
    servers = 5


class NestedRunLateServerTest(ServersTest):
    """A server whose yes came too late to count records another fence for the holder."""

    servers = 3

    def test_a_late_server_changes_neither_the_nested_fence_nor_what_status_claims(self):
        late, other = self.redis[2], self.redis[1]
        late.command("SET", "{lock:nest}:fence", "50")
        late.freeze()
        holder = self.holder(["-k", "nest", "-t", "1m"],
                             global_args=self.global_args).wait_ready()
        # The two servers that answered start from their clocks: the larger (far above 51) is
        # the fence.
        fence = holder.fence
        self.assertGreater(fence, 51)
        late.thaw()
        # The acquisition's request, written before the round was decided without it, runs
        # there now: the holder's token with counter and metadata 51 (its 0.4 counter, taken
        # over into the record).
        wait_until(lambda: late.command("HGET", "{lock:nest}:meta", "fence") == "51", 10,
                   message="the late request to run")
        other.freeze()
        self.addCleanup(other.thaw)
        nested = [*self.global_args, "run", "-k", "nest", "-n", "--", "sh", "-c",
                  'printf "%s" "$REDLOCK_FENCE"']
        r = holder.run_inside(nested, env={"REDLOCK_FENCE": str(fence)})
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, str(fence))
        # An environment that lost the fence: one server says the fence, the other 51.
        r = holder.run_inside(nested, unset=["REDLOCK_FENCE"])
        self.assertStatus(r, 69)
        self.assertIn("cannot tell the fence of the run this one is nested in", r.stderr)
        r = self.run_redlock([*self.global_args, "status", "--json", "nest"])
        self.assertStatus(r, 0)
        self.assertIsNone(json.loads(r.stdout)["locks"][0]["fence"])
        other.thaw()
        r = self.run_redlock([*self.global_args, "status", "--json", "nest"])
        self.assertEqual(json.loads(r.stdout)["locks"][0]["fence"], fence)
        self.assertEqual(holder.release(), 0)


def unshare_pid_namespace_or_skip(test):
    """Skips `test` unless this machine can start a shell in a new pid namespace with its
    own /proc (root, and unshare(1))."""
    if os.geteuid() != 0:
        test.skipTest("a new pid namespace needs root")
    if not shutil.which("unshare"):
        test.skipTest("unshare(1) is missing (util-linux)")
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", 'echo $$'],
                       capture_output=True, text=True)
    if r.returncode != 0 or r.stdout.strip() != "1":
        test.skipTest(f"unshare --pid --fork --mount-proc does not work here: {r.stderr.strip()}")


# A container's entrypoint, pid 1 of its namespace: takes the lock for itself, runs a
# `run` of the same name inside (nested: PROGRAM's fence and pid to $D/out, the status to
# $D/status), and releases. "$@" is redlock with its -s options.
ENTRYPOINT = r"""
eval "$("$@" acquire --shell -t 30s entry)" || exit 9
"$@" run -k entry -n -- sh -c 'echo "$REDLOCK_FENCE $$"' > "$D/out"
echo $? > "$D/status"
"$@" release entry --token "$REDLOCK_TOKEN"
"""


class NestedRunNamespaceTest(ServersTest):
    """Nested runs where pids are small: pid namespaces (containers)."""

    def setUp(self):
        super().setUp()
        unshare_pid_namespace_or_skip(self)

    def in_namespace(self, script, *args, env=None):
        """`sh -c SCRIPT sh ARGS...` as pid 1 of a new pid namespace, in the background."""
        p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script,
                              "sh", *args], env=self.env(env), cwd=self.tmp,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)

        def stop():
            if p.poll() is None:
                p.kill()
            p.communicate()
        self.addCleanup(stop)
        return p

    def read(self, path):
        with open(path) as f:
            return f.read()

    def test_a_forged_run_from_another_pid_namespace_is_an_ordinary_run(self):
        # A namespace with a shell of pid 2 that started before the holder acquired, and a
        # holder whose redlock is pid 2 of another namespace: host, boot and an ancestor
        # of that pid all match. With the token read from the server, and even with the
        # holder's nesting secret leaked to it, the forger must wait its turn (-n: 75).
        # The forger is HOLDER_SCRIPT (holding nothing) serving requests as pid 2.
        forger = self.mkdtemp("forger-")
        self.in_namespace('"$@"; true', "sh", "-c", HOLDER_SCRIPT, "sh", forger, "0")
        wait_until(lambda: os.path.exists(f"{forger}/ready"), 15,
                   message="the forger's namespace to start")
        self.assertEqual(self.read(f"{forger}/pid").strip(), "2")

        holder = self.mkdtemp("holder-")
        self.in_namespace('"$@"; true', REDLOCK_BIN, *self.global_args, "run", "-k", "ns",
                          "--", "sh", "-c", HOLDER_SCRIPT, "sh", holder, "0")
        wait_until(lambda: os.path.exists(f"{holder}/ready"), 15,
                   message="the holder's PROGRAM to start")
        self.assertEqual(self.redis[0].command("HGET", "{lock:ns}:meta", "pid"), "2")
        token = self.redis[0].command("GET", "lock:ns")
        secret = self.read(f"{holder}/secret")
        ran = self.path("ran")
        for leaked in ({}, {"REDLOCK_NEST_SECRET": secret}):
            with self.subTest(leaked=sorted(leaked)):
                words = ["env", "REDLOCK_KEY=ns", f"REDLOCK_TOKEN={token}"]
                words += [f"{k}={v}" for k, v in leaked.items()]
                words += [REDLOCK_BIN, *self.global_args, "run", "-k", "ns", "-n", "--",
                          "touch", ran]
                r = run_in_holder_script(forger, words, 30)
                self.assertStatus(r, 75)
                self.assertFalse(os.path.exists(ran),
                                 "a forged run ran PROGRAM beside the holder")
                self.assertIn("is not proven to run inside its holder", r.stderr)
        open(f"{forger}/go", "w").close()
        open(f"{holder}/go", "w").close()
        self.assertKeyGone(self.redis[0], "lock:ns")

    def test_a_script_that_is_pid_1_nests_a_run_under_its_own_acquire(self):
        d = self.mkdtemp("entry-")
        p = self.in_namespace(ENTRYPOINT, REDLOCK_BIN, *self.global_args, env={"D": d})
        out, err = p.communicate(timeout=60 * SLACK)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(self.read(f"{d}/status").strip(), "0", err)
        fence, pid = self.read(f"{d}/out").split()
        # The acquisition's fence, which the nested run inherits.
        self.assertEqual(fence, self.redis[0].command("HGET", "{lock:entry}:fence", "f"))
        self.assertNotEqual(pid, "1")
        self.assertKeyGone(self.redis[0], "lock:entry")


class OncePerTest(ServersTest):
    def setUp(self):
        super().setUp()
        self.marker = self.path("runs")

    def once(self, length, *args, env=None, name="op"):
        """One `run --once-per LENGTH` that appends a line to the marker file."""
        return self.run_redlock([*self.global_args, "run", "-k", name, "--once-per", length,
                                 *args, "--", "sh", "-c", 'echo ran >> "$1"', "sh",
                                 self.marker], env=env)

    def runs(self):
        if not os.path.exists(self.marker):
            return 0
        with open(self.marker) as f:
            return len(f.read().splitlines())

    def server_ms(self, server=None):
        seconds, micros = (server or self.redis[0]).command("TIME")
        return int(seconds) * 1000 + int(micros) // 1000

    def status_json(self, name="op"):
        r = self.run_redlock([*self.global_args, "status", "--json", name])
        self.assertStatus(r, 0)
        return json.loads(r.stdout)["locks"][0]

    def test_a_second_run_in_the_slot_does_not_run_and_exits_75_or_e(self):
        r = self.once("1h")
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        again = self.once("1h")
        self.assertStatus(again, 75)
        self.assertRegex(again.stderr, r"'op' has already run in this 1h slot: \S+@\S+ "
                         r"\(pid \d+\) started it at \d{4}-\d\d-\d\dT[\d:.]+Z")
        self.assertMessages(again.stderr)
        self.assertEqual(self.runs(), 1)
        self.assertStatus(self.once("1h", "-E", "0"), 0)
        quiet = self.run_redlock([*self.global_args, "-q", "run", "-k", "op", "--once-per",
                                  "1h", "-n", "-E", "0", "--", "true"])
        self.assertStatus(quiet, 0)
        self.assertEqual(quiet.stderr, "")
        self.assertEqual(self.runs(), 1)
        for server in self.redis:
            self.assertKeyGone(server, "lock:op")

    def test_status_shows_the_last_run_of_the_slot(self):
        r = self.run_redlock([*self.global_args, "run", "-k", "op", "--once-per", "1d", "--",
                              "sh", "-c", "exit 3"])
        self.assertStatus(r, 3)
        last = self.status_json()["last_run"]
        self.assertEqual(last["slot_ms"], 86400000)
        self.assertRegex(last["slot_start"], r"T00:00:00\.000Z$")  # days start at midnight UTC
        self.assertEqual(last["exit_status"], 3)
        self.assertEqual(last["command"], "sh -c 'exit 3'")
        self.assertLessEqual(last["started_at"], last["ended_at"])
        text = self.run_redlock([*self.global_args, "status", "op"])
        self.assertIn("  slot      the 1d slot from ", text.stdout)
        self.assertIn("  last run  ran, exit ", text.stdout)
        self.assertIn("exit status 3", text.stdout)
        # A lock never run with --once-per has none.
        self.assertIsNone(self.status_json("other")["last_run"])

    def test_the_clock_of_the_host_does_not_matter(self):
        if not shutil.which("faketime"):
            self.skipTest("faketime is not installed (scripts/setup.sh installs it)")
        self.assertStatus(self.once("1h"), 0)
        # Host B's clock is off: a few seconds behind, or a day ahead. The servers decide.
        for offset in ("-3s", "+1d", "-1d"):
            with self.subTest(offset=offset):
                args = ["faketime", "-f", offset, REDLOCK_BIN, *self.global_args, "run", "-k",
                        "op", "--once-per", "1h", "--", "sh", "-c", 'echo ran >> "$1"', "sh",
                        self.marker]
                env = self.env()
                # libfaketime is preloaded ahead of a sanitized binary's ASan runtime.
                env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                                       ":verify_asan_link_order=0").lstrip(":")
                cp = subprocess.run(args, capture_output=True, text=True, env=env,
                                    timeout=30 * SLACK)
                self.assertEqual(cp.returncode, 75, cp.stderr)
                self.assertIn("has already run in this 1h slot", cp.stderr)
        self.assertEqual(self.runs(), 1)

    def test_the_next_slot_runs_again(self):
        # 3 s slots (a run counts for the next one from 300 ms before it). Start right after
        # a slot began, so the first two runs are in one slot; retried if the machine was
        # too slow for that.
        for attempt in range(3):
            wait_until(lambda: self.server_ms() % 3000 < 1000, 10, message="a slot to begin")
            slot = self.server_ms() // 3000
            first = self.once("3s", name=f"slot{attempt}")
            second = self.once("3s", name=f"slot{attempt}")
            if self.server_ms() >= slot * 3000 + 2700:
                continue  # too slow: the second run may have been in the next slot
            self.assertStatus(first, 0)
            self.assertStatus(second, 75)
            wait_until(lambda: self.server_ms() >= (slot + 1) * 3000, 10,
                       message="the next slot")
            self.assertStatus(self.once("3s", name=f"slot{attempt}"), 0)
            self.assertEqual(self.runs(), 2)
            return
        self.fail("three attempts were each too slow to fit two runs in a 3 s slot")

    def test_a_run_waiting_for_the_slots_run_does_not_run_after_it(self):
        holder = self.holder(["-k", "op", "--once-per", "1h"],
                             global_args=self.global_args).wait_ready()
        # Running: the lock is held, so -n gives up as for any held lock.
        self.assertStatus(self.once("1h", "-n"), 75)
        waiter = self.start_redlock([*self.global_args, "run", "-k", "op", "--once-per", "1h",
                                     "-w", "30s", "--", "touch", self.marker])
        time.sleep(0.2)
        self.assertEqual(holder.release(), 0)
        self.assertEqual(waiter.wait(30), 75, waiter.stderr)
        self.assertIn("has already run in this 1h slot", waiter.stderr)
        self.assertFalse(os.path.exists(self.marker))

    def test_a_program_that_cannot_be_run_does_not_use_up_the_slot(self):
        # A typo in one host's crontab must not skip the slot for the hosts (or the
        # corrected line) that can run the job: the slot stays open, and status says why
        # the attempt did not start.
        missing = self.run_redlock([*self.global_args, "run", "-k", "op", "--once-per", "1h",
                                    "--", "/nonexistent"])
        self.assertStatus(missing, 127)
        self.assertIn("cannot run '/nonexistent': No such file or directory", missing.stderr)
        self.assertMessages(missing.stderr)
        last = self.status_json()["last_run"]
        self.assertEqual(last["command"], "/nonexistent")
        self.assertEqual(last["exit_status"], 127)
        self.assertEqual(last["start_error"],
                         "cannot run '/nonexistent': No such file or directory")
        self.assertIsNotNone(last["ended_at"])
        text = self.run_redlock([*self.global_args, "status", "op"])
        self.assertIn("            did not start (exit status 127): cannot run '/nonexistent': "
                      "No such file or directory; the slot stays open\n", text.stdout)
        self.assertNotIn("not ended", text.stdout)
        # Not executable (126): the same.
        script = self.write_file("not-executable", "#!/bin/sh\n", mode=0o644)
        denied = self.run_redlock([*self.global_args, "run", "-k", "op", "--once-per", "1h",
                                   "--", script])
        self.assertStatus(denied, 126)
        self.assertEqual(self.status_json()["last_run"]["exit_status"], 126)
        # The slot is still there to be run, once, and is then used up.
        self.assertStatus(self.once("1h"), 0)
        last = self.status_json()["last_run"]
        self.assertEqual(last["exit_status"], 0)
        self.assertIsNone(last["start_error"])
        self.assertStatus(self.once("1h"), 75)
        self.assertEqual(self.runs(), 1)

    def test_bad_lengths_are_usage_errors(self):
        for value in ("0", "500ms", "-1h", "hourly", ""):
            with self.subTest(value=value):
                r = self.once(value)
                self.assertStatus(r, 64)
                self.assertMessages(r.stderr)
        self.assertEqual(self.runs(), 0)


class OncePerFiveServersTest(OncePerTest):
    servers = 5

    def test_a_minority_down_does_not_change_the_count(self):
        self.redis[0].kill()
        self.redis[1].freeze()
        self.addCleanup(self.redis[1].thaw)
        self.assertStatus(self.once("1h"), 0)
        self.assertStatus(self.once("1h"), 75)
        self.assertEqual(self.runs(), 1)


# PROGRAM of a --limit contender: counts itself in (under flock), records the most seen
# inside at once, holds for a while, counts itself out.
LIMIT_PROGRAM = r'''
d=$1
count() { flock "$d/lock" sh -c 'n=$(($(cat "$1/inside") + $2)); echo $n > "$1/inside";
  [ $n -gt $(cat "$1/most") ] && echo $n > "$1/most"; true' sh "$d" "$1"; }
count 1
sleep 0.2
count -1
echo run >> "$d/runs"
'''


class LimitTest(ServersTest):

    def run_limited(self, limit, *args, program=("true",), env=None):
        return self.run_redlock([*self.global_args, "run", "-k", "pool", "--limit", str(limit),
                                 *args, "--", *program], env=env)

    def holders(self, n, limit=3, ttl="30s"):
        return [self.holder(["-k", "pool", "--limit", str(limit), "-t", ttl],
                            global_args=self.global_args) for _ in range(n)]

    def status(self):
        r = self.run_redlock([*self.global_args, "status", "--json", "pool"])
        self.assertStatus(r, 0)
        return json.loads(r.stdout)["locks"][0]

    def assertNothingLeft(self):
        # A release returns once a majority answered: the rest may take a moment.
        def left(server):
            keys = sorted(k.decode() if isinstance(k, bytes) else k
                          for k in server.command("KEYS", "*pool*"))
            return [k for k in keys if not k.endswith((":fence", ":history", ":stats"))]

        for server in self.redis:
            try:
                wait_until(lambda: not left(server), 5, message="the permits to go")
            except AssertionError:
                self.fail(f"left on {server.url()}: {left(server)}")

    def test_seven_contenders_never_more_than_three_at_once_and_all_run(self):
        self.write_file("inside", "0\n")
        self.write_file("most", "0\n")
        self.write_file("lock", "")
        procs = [self.start_redlock([*self.global_args, "run", "-k", "pool", "--limit", "3",
                                     "-w", "60s", "--", "sh", "-c", LIMIT_PROGRAM, "sh",
                                     self.tmp]) for _ in range(7)]
        for p in procs:
            self.assertEqual(p.wait(120), 0, p.stderr)
        with open(self.path("runs")) as f:
            self.assertEqual(len(f.read().splitlines()), 7)
        with open(self.path("most")) as f:
            self.assertLessEqual(int(f.read()), 3)
        self.assertNothingLeft()

    def test_three_hold_at_once_each_with_its_own_permit_and_a_fourth_waits(self):
        holders = [h.wait_ready() for h in self.holders(3)]
        self.assertStatus(self.run_limited(3, "-n"), 75)
        view = self.status()
        self.assertEqual(view["limit"], 3)
        self.assertEqual(view["state"], "held")
        held = {p["token_prefix"] for p in view["permits"] if p["state"] == "held"}
        self.assertEqual(held, {h.token[:8] for h in holders})
        text = self.run_redlock([*self.global_args, "status", "pool"]).stdout
        self.assertIn("pool: 3 of 3 permits held (--limit 3)", text)
        listed = self.run_redlock([*self.global_args, "list"]).stdout
        self.assertIn("(3 of 3 permits)", listed)
        # A fourth waits, and gets the permit the first one gives back.
        waiter = self.start_redlock([*self.global_args, "run", "-k", "pool", "--limit", "3",
                                     "-w", "30s", "--", "sh", "-c",
                                     'printf "%s" "$REDLOCK_PERMIT" > "$1"', "sh",
                                     self.path("permit")])
        self.assertEqual(holders[0].release(), 0)
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        with open(self.path("permit")) as f:
            self.assertIn(f.read(), {"1", "2", "3"})
        for h in holders[1:]:
            self.assertEqual(h.release(), 0)
        self.assertNothingLeft()

    def test_a_killed_holders_permit_comes_back_within_its_ttl(self):
        holders = [h.wait_ready() for h in self.holders(3, ttl="1s")]
        os.kill(holders[0].proc.pid, 9)
        self.kill_at_cleanup(holders[0].program_pid)
        started = time.monotonic()
        r = self.run_limited(3, "-w", "20s")
        self.assertStatus(r, 0)
        self.assertLess(time.monotonic() - started, 10 * SLACK)  # the TTL, not the wait
        for h in holders[1:]:
            self.assertEqual(h.release(), 0)
        self.assertNothingLeft()

    def test_runs_that_disagree_on_the_limit_are_refused(self):
        holder = self.holders(1)[0].wait_ready()
        for other in ("2", "5"):
            with self.subTest(limit=other):
                r = self.run_limited(other, "-n", program=("touch", self.path("ran")))
                self.assertStatus(r, 64)
                self.assertIn("it is held with --limit 3, and this run asked for --limit "
                              f"{other}", r.stderr)
                self.assertMessages(r.stderr)
        self.assertFalse(os.path.exists(self.path("ran")))
        self.assertEqual(holder.release(), 0)
        # Once nobody holds it, another limit is fine.
        self.assertStatus(self.run_limited(5, "-n"), 0)
        self.assertNothingLeft()

    def test_a_plain_lock_and_a_semaphore_of_one_name_exclude_each_other(self):
        plain = self.holder(["-k", "pool"], global_args=self.global_args).wait_ready()
        r = self.run_limited(3, "-n")
        self.assertStatus(r, 75)
        self.assertIn("lock 'pool' is held: none of its 3 permits is free", r.stderr)
        self.assertEqual(plain.release(), 0)
        holder = self.holders(1)[0].wait_ready()
        r = self.run_redlock([*self.global_args, "run", "-k", "pool", "-n", "--", "true"])
        self.assertStatus(r, 75)
        self.assertEqual(holder.release(), 0)
        self.assertNothingLeft()

    def test_a_nested_run_uses_the_outer_permit(self):
        inner = [REDLOCK_BIN, *self.global_args, "run", "-k", "pool", "--limit", "3", "-n",
                 "--", "sh", "-c", 'echo "$REDLOCK_PERMIT $REDLOCK_FENCE" > "$0"',
                 self.path("inner")]
        holders = [h.wait_ready() for h in self.holders(2)]  # one permit left: the outer's
        r = self.run_limited(3, program=("sh", "-c", '"$@"; echo "$REDLOCK_PERMIT '
                                         '$REDLOCK_FENCE" > "$0"', self.path("outer"), *inner))
        self.assertStatus(r, 0)
        with open(self.path("inner")) as a, open(self.path("outer")) as b:
            self.assertEqual(a.read(), b.read())
        for h in holders:
            self.assertEqual(h.release(), 0)

    def test_extend_and_release_find_the_permit_of_a_token(self):
        holder = self.holders(1)[0].wait_ready()
        token = holder.token
        r = self.run_redlock([*self.global_args, "extend", "pool", "-t", "5m", "--token", token])
        self.assertStatus(r, 0)
        ttls = [p["ttl_ms"] for p in self.status()["permits"] if p["token_prefix"] == token[:8]]
        self.assertEqual(len(ttls), 1)
        self.assertGreater(ttls[0], 60_000)
        r = self.run_redlock([*self.global_args, "release", "pool", "--token", "f" * 32])
        self.assertStatus(r, 75)
        r = self.run_redlock([*self.global_args, "release", "pool", "--token", token])
        self.assertStatus(r, 0)
        self.assertEqual(self.status()["state"], "free")
        self.assertEqual(holder.release(), 0)  # done before its next renewal could notice

    def test_bad_limits_are_usage_errors(self):
        for args in (["--limit", "0"], ["--limit", "1001"], ["--limit", "x"],
                     ["--limit", "3", "--fair"], ["--limit", "3", "--once-per", "1h"]):
            with self.subTest(args=args):
                r = self.run_redlock([*self.global_args, "run", "-k", "pool", *args, "--",
                                      "true"])
                self.assertStatus(r, 64)
                self.assertMessages(r.stderr)

    def test_a_limit_of_one_is_the_plain_lock(self):
        plain = self.holder(["-k", "pool"], global_args=self.global_args).wait_ready()
        r = self.run_limited(1, "-n")
        self.assertStatus(r, 75)
        self.assertIn("lock 'pool' is held by another owner", r.stderr)
        self.assertEqual(plain.release(), 0)


class LimitFiveServersTest(LimitTest):
    servers = 5

    def test_a_minority_down_changes_nothing(self):
        self.redis[0].kill()
        self.redis[1].freeze()
        self.addCleanup(self.redis[1].thaw)
        holders = [h.wait_ready() for h in self.holders(3)]
        self.assertStatus(self.run_limited(3, "-n"), 75)
        for h in holders:
            self.assertEqual(h.release(), 0)


if __name__ == "__main__":
    unittest.main()
