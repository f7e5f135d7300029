"""status, list, acquire, extend and release against real servers (one, and five).

What an operator sees while a `run` holds a lock (holder metadata), locks taken by other
clients, servers that are down, forced release, and the acquire/extend/release primitives
for shell scripts. JSON output is parsed back with json.loads.
"""

import datetime
import json
import os
import pwd
import re
import shlex
import socket
import subprocess
import unittest

from redlock_e2e import REDLOCK_BIN, SLACK, E2ETest, HOLDER_SCRIPT, wait_until

TOKEN = re.compile(r"^[0-9a-f]{32}$")
ISO_8601 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)$")


def user_name():
    return pwd.getpwuid(os.geteuid()).pw_name


class RunHolder:
    """`redlock run -k NAME -- sh holder.sh DIR 0 'two words'`: PROGRAM records its
    REDLOCK_TOKEN, then holds the lock until release() (see HOLDER_SCRIPT)."""

    def __init__(self, test, urls, name, *run_args):
        self.dir = test.mkdtemp("holder-")
        script = os.path.join(self.dir, "holder.sh")
        with open(script, "w") as f:
            f.write(HOLDER_SCRIPT)
        # The last word is ignored by the script; it shows how the command line is quoted.
        self.argv = ["sh", script, self.dir, "0", "two words"]
        global_args = [a for url in urls for a in ("-s", url)]
        self.proc = test.start_redlock(global_args + ["run", "-k", name, *run_args, "--",
                                                      *self.argv])
        wait_until(lambda: os.path.exists(os.path.join(self.dir, "ready")), 15.0,
                   message="the holder's PROGRAM to start", proc=self.proc)
        with open(os.path.join(self.dir, "token")) as f:
            self.token = f.read()

    def release(self, timeout=30.0):
        with open(os.path.join(self.dir, "go"), "w"):
            pass
        return self.proc.wait(timeout)


class InspectTestBase(E2ETest):
    def redlock(self, urls, *args, **kw):
        global_args = [a for url in urls for a in ("-s", url)]
        return self.run_redlock(global_args + list(args), **kw)

    def json_of(self, result):
        try:
            return json.loads(result.stdout)
        except ValueError as e:
            self.fail(f"stdout is not one JSON document ({e}): {result!r}")

    def status_json(self, urls, name, key_option=False):
        r = self.redlock(urls, "status", "--json", *(["-k", name] if key_option else [name]))
        self.assertStatus(r, 0)
        doc = self.json_of(r)
        self.assertEqual(len(doc["locks"]), 1, doc)
        lock = doc["locks"][0]
        self.assertEqual(lock["name"], name)
        return lock

    def assertIsoRecent(self, text):
        self.assertRegex(text, ISO_8601)
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        age = datetime.datetime.now(datetime.timezone.utc) - when
        self.assertLess(abs(age.total_seconds()), 600, f"acquired_at {text} is not recent")

    def dead_server_url(self):
        """The URL of a redis-server that was started and killed (connection refused)."""
        server = self.redis_server()
        server.kill()
        return server.url(), f"127.0.0.1:{server.port}"


# ---------------------------------------------------------------------------------------


class StatusTest(InspectTestBase):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def test_holder_metadata_is_visible_while_run_holds_the_lock_and_gone_after(self):
        h = RunHolder(self, [self.url], "nightly")
        self.assertRegex(h.token, TOKEN)

        lock = self.status_json([self.url], "nightly")
        self.assertEqual(lock["key"], "lock:nightly")
        self.assertEqual(lock["state"], "held")
        self.assertIsInstance(lock["ttl_ms"], int)
        self.assertGreater(lock["ttl_ms"], 0)
        self.assertLessEqual(lock["ttl_ms"], 30000)
        self.assertEqual(lock["token_prefix"], h.token[:8])
        holder = lock["holder"]
        self.assertIsNotNone(holder, lock)
        self.assertEqual(holder["host"], socket.gethostname())
        self.assertEqual(holder["pid"], h.proc.pid)  # redlock's pid, not PROGRAM's
        self.assertEqual(holder["user"], user_name())
        self.assertEqual(shlex.split(holder["command"]), h.argv, holder["command"])
        self.assertIsoRecent(holder["acquired_at"])
        # Which machine and boot: what `redlock reap` goes by.
        with open("/proc/sys/kernel/random/boot_id") as f:
            self.assertEqual(holder["boot_id"], f.read().strip())
        if os.path.exists("/etc/machine-id"):
            with open("/etc/machine-id") as f:
                self.assertEqual(holder["machine_id"], f.read().strip() or None)

        # The metadata lives next to the lock, in the contract's key layout, with a TTL.
        self.assertEqual(self.server.command("EXISTS", "{lock:nightly}:meta"), 1)
        self.assertGreater(self.server.command("PTTL", "{lock:nightly}:meta"), 0)

        r = self.redlock([self.url], "status", "nightly")
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        out = r.stdout
        self.assertIn("nightly", out)
        self.assertIn("held", out)
        self.assertIn(socket.gethostname(), out)
        self.assertIn(str(h.proc.pid), out)
        self.assertIn(user_name(), out)
        self.assertIn(holder["command"], out)
        self.assertIn(holder["acquired_at"], out)
        self.assertIn(f"  token     {h.token[:8]}...\n", out)
        self.assertNotIn(h.token, out)
        for line in out.splitlines():
            self.assertLessEqual(len(line), 80 + len(holder["command"]), out)

        self.assertEqual(h.release(), 0)
        lock = self.status_json([self.url], "nightly")
        self.assertEqual(lock["state"], "free")
        self.assertIsNone(lock["holder"])
        self.assertIsNone(lock["token_prefix"])
        self.assertKeyGone(self.server, "lock:nightly")
        self.assertKeyGone(self.server, "{lock:nightly}:meta")
        r = self.redlock([self.url], "status", "nightly")
        self.assertStatus(r, 0)
        self.assertIn("free", r.stdout)

    def test_a_foreign_lock_is_held_by_unknown(self):
        # What redis-py's Lock (and redsync, node-redlock) do: SET key token NX PX.
        self.assertEqual(self.server.command("SET", "lock:foreign", "py-token", "NX", "PX",
                                             "60000"), "OK")
        lock = self.status_json([self.url], "foreign")
        self.assertEqual(lock["state"], "held")
        self.assertIsNone(lock["holder"])
        self.assertEqual(lock["token_prefix"], "py-token")
        self.assertGreater(lock["ttl_ms"], 0)
        self.assertLessEqual(lock["ttl_ms"], 60000)

        r = self.redlock([self.url], "status", "foreign")
        self.assertStatus(r, 0)
        self.assertIn("held", r.stdout)
        self.assertIn("unknown", r.stdout)
        # Looking does not touch it.
        self.assertEqual(self.server.command("GET", "lock:foreign"), "py-token")

    def test_a_foreign_hash_of_any_size_is_read_as_far_as_it_can_be(self):
        # Another client's hashes where the metadata and the --once-per record go: 40,000
        # fields each (0.4 read them whole, a reply too large to read: status exited 69 and
        # list said "(unknown state)"), and a value of 5 MB. Only redlock's fields are read.
        self.server.command("SET", "lock:big", "big-token", "PX", "60000")
        for key in ("{lock:big}:meta", "{lock:big}:fence"):
            args = ["HSET", key]
            for i in range(40_000):
                args += [f"field-{i}", "value"]
            self.server.command(*args)
        self.server.command("HSET", "{lock:big}:meta", "token", "big-token", "host", "far-away",
                            "pid", "7", "user", "someone", "command", "x" * (5 << 20))
        lock = self.status_json([self.url], "big")
        self.assertEqual(lock["state"], "held")
        self.assertEqual(lock["holder"]["host"], "far-away")
        self.assertLessEqual(len(lock["holder"]["command"]), 4096)
        r = self.redlock([self.url], "status", "big")
        self.assertStatus(r, 0)
        self.assertIn("someone@far-away", r.stdout)
        r = self.redlock([self.url], "list")
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"\nbig +\d+\.\ds +someone@far-away:7 ")
        self.assertNotIn("unknown state", r.stdout)

    def test_an_unknown_lock_is_free(self):
        r = self.redlock([self.url], "status", "never-taken")
        self.assertStatus(r, 0)
        self.assertIn("free", r.stdout)
        lock = self.status_json([self.url], "never-taken")
        self.assertEqual(lock["key"], "lock:never-taken")
        self.assertEqual(lock["state"], "free")
        self.assertIsNone(lock["holder"])

    def test_several_names_give_one_entry_each(self):
        self.server.command("SET", "lock:b", "tok", "PX", "60000")
        r = self.redlock([self.url], "status", "--json", "a", "b")
        self.assertStatus(r, 0)
        locks = self.json_of(r)["locks"]
        self.assertEqual([(l["name"], l["state"]) for l in locks], [("a", "free"), ("b", "held")])

    def test_key_option_is_the_same_as_the_positional_name(self):
        h = RunHolder(self, [self.url], "by-key")
        by_name = self.status_json([self.url], "by-key")
        by_key = self.status_json([self.url], "by-key", key_option=True)
        for field in ("name", "key", "state", "token_prefix", "holder"):
            self.assertEqual(by_key[field], by_name[field], field)
        r = self.redlock([self.url], "status", "--key", "by-key")
        self.assertStatus(r, 0)
        self.assertIn(f"  token     {h.token[:8]}...\n", r.stdout)
        self.assertEqual(h.release(), 0)

    def test_an_invalid_name_is_a_usage_error(self):
        for name in ("bad name", "bad*", "", "x" * 201, "tab\there"):
            for args in (["status", name], ["status", "-k", name], ["acquire", name],
                         ["extend", name, "--token", "t"], ["release", name, "--token", "t"],
                         ["release", "-k", name, "--force", "--yes"]):
                with self.subTest(args=args):
                    r = self.redlock([self.url], *args)
                    self.assertStatus(r, 64)
                    self.assertEqual(r.stdout, "")
                    self.assertMessages(r.stderr)
        self.assertEqual(self.server.command("DBSIZE"), 0)

    def test_a_missing_name_is_a_usage_error(self):
        for command in ("status", "acquire", "release", "extend"):
            with self.subTest(command=command):
                r = self.redlock([self.url], command)
                self.assertStatus(r, 64)
                self.assertMessages(r.stderr)

    def test_server_down_exits_69_naming_the_server(self):
        url, name = self.dead_server_url()
        for json_flag in ([], ["--json"]):
            with self.subTest(json=bool(json_flag)):
                r = self.redlock([url], "status", *json_flag, "job")
                self.assertStatus(r, 69)
                self.assertIn(name, r.stderr)
                self.assertMessages(r.stderr)
                # One failure, one message; nothing on stdout that looks like a result.
                self.assertEqual(r.stdout, "")
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)

    def test_a_refused_password_is_called_refused_not_unreachable(self):
        locked = self.redis_server(requirepass="right")
        others = [self.redis_server() for _ in range(2)]
        urls = [locked.url(password="wrong")] + [s.url() for s in others]
        r = self.redlock(urls, "status", "job")
        self.assertStatus(r, 0)
        line = [l for l in r.stdout.splitlines() if f":{locked.port}" in l]
        self.assertEqual(len(line), 1, r.stdout)
        self.assertIn("refused: authentication refused", line[0])
        self.assertNotIn("unreachable", r.stdout)
        r = self.redlock(urls, "status", "--json", "job")
        states = [s["state"] for s in self.json_of(r)["locks"][0]["servers"]]
        self.assertEqual(states, ["refused", "free", "free"])
        r = self.redlock(urls[:1], "status", "job")
        self.assertStatus(r, 77)
        self.assertEqual(r.stdout, "")


class FiveServerTest(InspectTestBase):
    def setUp(self):
        super().setUp()
        self.servers = [self.redis_server() for _ in range(5)]
        self.urls = [s.url() for s in self.servers]

    def names(self, server):
        return f"127.0.0.1:{server.port}"

    def test_status_with_one_server_down_still_answers(self):
        down = self.servers[2]
        h = RunHolder(self, self.urls, "multi")
        for s in self.servers:
            self.assertEqual(s.command("GET", "lock:multi"), h.token)
        down.kill()

        lock = self.status_json(self.urls, "multi")
        self.assertEqual(lock["state"], "held")
        self.assertEqual(lock["token_prefix"], h.token[:8])
        self.assertGreater(lock["ttl_ms"], 0)
        self.assertEqual(lock["holder"]["pid"], h.proc.pid)
        servers = lock["servers"]
        self.assertEqual(len(servers), 5, servers)
        by_name = {s["server"]: s for s in servers}
        self.assertEqual(set(by_name), {self.names(s) for s in self.servers})
        dead = by_name[self.names(down)]
        self.assertEqual(dead["state"], "unreachable")
        self.assertTrue(dead["error"])
        for s in self.servers:
            if s is not down:
                view = by_name[self.names(s)]
                self.assertEqual(view["state"], "held", view)
                self.assertEqual(view["token_prefix"], h.token[:8])
                self.assertIsNone(view["error"])

        r = self.redlock(self.urls, "status", "multi")
        self.assertStatus(r, 0)
        dead_lines = [l for l in r.stdout.splitlines() if self.names(down) in l]
        self.assertEqual(len(dead_lines), 1, r.stdout)
        self.assertIn("unreachable", dead_lines[0])

        # An unknown lock is still "free" with one server down.
        lock = self.status_json(self.urls, "nothing-here")
        self.assertEqual(lock["state"], "free")
        self.assertEqual(h.release(), 0)

    def test_list_merges_servers_with_one_down(self):
        down = self.servers[4]
        h = RunHolder(self, self.urls, "job-a")
        tokens = {"job-a": h.token}
        for name in ("job-b", "other"):
            r = self.redlock(self.urls, "acquire", name, "-t", "5m")
            self.assertStatus(r, 0)
            tokens[name] = r.stdout.strip()
        # A foreign lock on a majority, and a stale key on one server only (not a held lock).
        for s in self.servers[:3]:
            s.command("SET", "lock:foreign", "py-token", "NX", "PX", "60000")
        self.servers[1].command("SET", "lock:stale", "old-token", "PX", "60000")
        tokens["foreign"] = "py-token"
        down.kill()

        r = self.redlock(self.urls, "list", "--json")
        self.assertStatus(r, 0)
        self.assertIn(self.names(down), r.stderr)
        self.assertMessages(r.stderr)
        locks = self.json_of(r)["locks"]
        names = [l["name"] for l in locks]
        self.assertEqual(sorted(names), ["foreign", "job-a", "job-b", "other"], locks)
        for l in locks:
            self.assertEqual(l["state"], "held", l)
            self.assertEqual(l["key"], "lock:" + l["name"])
            self.assertEqual(l["token_prefix"], tokens[l["name"]][:8])
            self.assertGreater(l["ttl_ms"], 0)
            self.assertEqual(len(l["servers"]), 5)
        by_name = {l["name"]: l for l in locks}
        self.assertEqual(by_name["job-a"]["holder"]["pid"], h.proc.pid)
        self.assertEqual(shlex.split(by_name["job-a"]["holder"]["command"]), h.argv)
        self.assertIsNotNone(by_name["job-b"]["holder"])
        self.assertIsNone(by_name["foreign"]["holder"])

        r = self.redlock(self.urls, "list")
        self.assertStatus(r, 0)
        self.assertIn(self.names(down), r.stderr)
        rows = [l.split()[0] for l in r.stdout.splitlines()[1:] if l.strip()]
        self.assertEqual(sorted(rows), ["foreign", "job-a", "job-b", "other"], r.stdout)
        for line in r.stdout.splitlines():
            self.assertLessEqual(len(line), 80, r.stdout)

        for pattern_args in (["--pattern", "job-*"], ["-p", "job-*"]):
            with self.subTest(pattern=pattern_args):
                r = self.redlock(self.urls, "list", *pattern_args, "--json")
                self.assertStatus(r, 0)
                self.assertEqual(sorted(l["name"] for l in self.json_of(r)["locks"]),
                                 ["job-a", "job-b"])
        r = self.redlock(self.urls, "list", "--pattern", "job-*")
        self.assertStatus(r, 0)
        rows = [l.split()[0] for l in r.stdout.splitlines()[1:] if l.strip()]
        self.assertEqual(sorted(rows), ["job-a", "job-b"], r.stdout)
        r = self.redlock(self.urls, "list", "--pattern", "nomatch*", "--json")
        self.assertStatus(r, 0)
        self.assertEqual(self.json_of(r)["locks"], [])

        self.assertEqual(h.release(), 0)
        r = self.redlock(self.urls, "list", "--json")
        self.assertStatus(r, 0)
        self.assertNotIn("job-a", [l["name"] for l in self.json_of(r)["locks"]])

    def test_acquire_extend_release_with_one_server_down(self):
        down = self.servers[0]
        down.kill()
        live = self.servers[1:]
        r = self.redlock(self.urls, "acquire", "-k", "five", "-t", "10m")
        self.assertStatus(r, 0)
        token = r.stdout.strip()
        self.assertRegex(token, TOKEN)
        for s in live:
            self.assertEqual(s.command("GET", "lock:five"), token)
        r = self.redlock(self.urls, "acquire", "five", "-n")
        self.assertStatus(r, 75)
        r = self.redlock(self.urls, "extend", "-k", "five", "--token", token, "-t", "20m")
        self.assertStatus(r, 0)
        for s in live:
            self.assertGreater(s.command("PTTL", "lock:five"), 600_000)
        # A wrong token is "not ours" (75), never "servers unavailable" (69): four of five
        # answer. Repeated, as the round is decided before every server has answered.
        for _ in range(5):
            r = self.redlock(self.urls, "extend", "five", "--token", "f" * 32, "-t", "1h")
            self.assertStatus(r, 75)
            r = self.redlock(self.urls, "release", "five", "--token", "f" * 32)
            self.assertStatus(r, 75)
        for s in live:
            self.assertEqual(s.command("GET", "lock:five"), token)
        r = self.redlock(self.urls, "release", "-k", "five", "--token", token)
        self.assertStatus(r, 0)
        for s in live:
            self.assertKeyGone(s, "lock:five")
            self.assertKeyGone(s, "{lock:five}:meta")

    def test_list_with_every_server_down_exits_69(self):
        for s in self.servers:
            s.kill()
        r = self.redlock(self.urls, "list")
        self.assertStatus(r, 69)
        self.assertIn(self.names(self.servers[0]), r.stderr)


class ListSingleServerTest(InspectTestBase):
    def test_list_on_an_empty_server_and_with_locks(self):
        server = self.redis_server()
        url = server.url()
        r = self.redlock([url], "list", "--json")
        self.assertStatus(r, 0)
        self.assertEqual(self.json_of(r)["locks"], [])
        # Keys that are not locks (another prefix) are not listed.
        server.command("SET", "cache:x", "1")
        server.command("SET", "lock:a.b/c@d+e:f", "tok", "PX", "60000")
        r = self.redlock([url], "list", "--json")
        self.assertStatus(r, 0)
        self.assertEqual([l["name"] for l in self.json_of(r)["locks"]], ["a.b/c@d+e:f"])

    def test_list_with_the_server_down_exits_69(self):
        url, name = self.dead_server_url()
        for json_flag in ([], ["--json"]):
            r = self.redlock([url], "list", *json_flag)
            self.assertStatus(r, 69)
            self.assertIn(name, r.stderr)
            # The error once; no table header or {"locks": []} for what was not read.
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
            self.assertEqual(r.stdout, "")


# ---------------------------------------------------------------------------------------


class ForceReleaseTest(InspectTestBase):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def force_release_lets_a_waiter_in(self, release_args, **run_kw):
        h = RunHolder(self, [self.url], "stuck", "-t", "3s")
        marker = self.path("waiter-ran")
        waiter = self.start_redlock(["-s", self.url, "run", "-k", "stuck", "-w", "20s", "--",
                                     "touch", marker])
        self.assertFalse(os.path.exists(marker))
        self.assertIsNone(waiter.poll(), f"waiter ended early: {waiter.stderr!r}")

        r = self.redlock([self.url], "release", "stuck", "--force", *release_args, **run_kw)
        self.assertStatus(r, 0)
        # It says what it removed: the token and who held it.
        self.assertIn(h.token, r.stdout)
        self.assertIn(str(h.proc.pid), r.stdout)
        self.assertIn(socket.gethostname(), r.stdout)

        self.assertEqual(waiter.wait(30.0), 0, waiter.stderr)
        self.assertTrue(os.path.exists(marker))
        # The forced-out holder notices its lease is gone: PROGRAM stopped, status 79.
        self.assertEqual(h.proc.wait(30.0), 79, h.proc.stderr)
        self.assertKeyGone(self.server, "lock:stuck")
        self.assertKeyGone(self.server, "{lock:stuck}:meta")

    def test_force_with_yes(self):
        self.force_release_lets_a_waiter_in(["--yes"])

    def test_force_without_yes_does_not_ask_when_stdin_is_not_a_terminal(self):
        self.force_release_lets_a_waiter_in([])

    def test_force_removes_a_foreign_lock(self):
        self.server.command("SET", "lock:foreign", "py-token", "NX", "PX", "60000")
        r = self.redlock([self.url], "release", "-k", "foreign", "-f", "-y")
        self.assertStatus(r, 0)
        self.assertIn("py-token", r.stdout)
        self.assertKeyGone(self.server, "lock:foreign")

    def test_a_name_in_brackets_is_refused_as_typed_not_read_as_a_list(self):
        # CLI11 reads "[prod]" given to a list of names as prod: the lock prod must stay.
        self.server.command("SET", "lock:prod", "py-token", "NX", "PX", "60000")
        self.server.command("SET", "lock:a", "py-token", "NX", "PX", "60000")
        for args in (["release", "[prod]", "--force", "--yes"], ["status", "[a,b]"],
                     ["status", "a", "[prod]"], ["history", "[prod]"], ["acquire", "[prod]"],
                     ["extend", "[prod]", "--token", "py-token"],
                     ["release", "[prod]", "--token", "py-token"]):
            with self.subTest(args=args):
                r = self.redlock([self.url], *args)
                self.assertStatus(r, 64)
                self.assertEqual(r.stdout, "")
                self.assertIn("redlock: invalid lock name '[", r.stderr)
        self.assertEqual(self.server.command("GET", "lock:prod"), "py-token")
        # Several names are several words.
        r = self.redlock([self.url], "status", "--json", "a", "prod")
        self.assertStatus(r, 0)
        self.assertEqual([lock["name"] for lock in self.json_of(r)["locks"]], ["a", "prod"])

    def test_force_on_a_free_lock_is_not_an_error(self):
        r = self.redlock([self.url], "release", "nothing", "--force", "--yes")
        self.assertStatus(r, 0)

    def test_force_on_a_terminal_asks_first(self):
        for answer, released in (("n", False), ("y", True)):
            with self.subTest(answer=answer):
                self.server.command("SET", "lock:asked", "tok-" + answer, "PX", "60000")
                master, slave = os.openpty()
                try:
                    proc = self.start_redlock(["-s", self.url, "release", "asked", "--force"],
                                              stdin=slave)
                    wait_until(lambda: "[y/N]" in proc.stderr, 15.0,
                               message="the confirmation prompt", proc=proc)
                    self.assertEqual(self.server.command("GET", "lock:asked"), "tok-" + answer)
                    os.write(master, (answer + "\n").encode())
                    rc = proc.wait(15.0)
                finally:
                    os.close(slave)
                    os.close(master)
                if released:
                    self.assertEqual(rc, 0, proc.stderr)
                    self.assertKeyGone(self.server, "lock:asked")
                else:
                    self.assertEqual(rc, 75, proc.stderr)  # documented: the lock is held
                    self.assertIn("left as it is", proc.stderr)
                    self.assertEqual(self.server.command("GET", "lock:asked"), "tok-n")
                    self.server.command("DEL", "lock:asked")

    def test_force_with_the_server_down_exits_69(self):
        url, name = self.dead_server_url()
        r = self.redlock([url], "release", "x", "--force", "--yes")
        self.assertStatus(r, 69)
        self.assertIn(name, r.stderr)


# ---------------------------------------------------------------------------------------


class AcquireExtendReleaseTest(InspectTestBase):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def pttl(self, key):
        return self.server.command("PTTL", key)

    def test_acquire_whose_token_cannot_be_written_releases_and_exits_70(self):
        # It used to exit 0 leaving a lock whose token nobody had, for its whole TTL.
        cases = (("full", [REDLOCK_BIN], "/dev/full", "No space left on device"),
                 ("closed", ["sh", "-c", 'exec "$0" "$@" >&-', REDLOCK_BIN], None,
                  "Bad file descriptor"))
        for name, command, target, cause in cases:
            for json_flag in ([], ["--json"]):
                with self.subTest(case=name, json=bool(json_flag)):
                    out = open(target, "w") if target else None
                    try:
                        cp = subprocess.run(command + ["-s", self.url, "acquire", name, "-t", "1m",
                                                       *json_flag],
                                            stdout=out, stderr=subprocess.PIPE, env=self.env(),
                                            cwd=self.tmp, timeout=30 * SLACK)
                    finally:
                        if out:
                            out.close()
                    stderr = cp.stderr.decode()
                    self.assertEqual(cp.returncode, 70, stderr)
                    self.assertIn(f"redlock: write error on standard output: {cause}\n", stderr)
                    self.assertIn(f"redlock: released '{name}' again: its token could not be "
                                  "written\n", stderr)
                    self.assertKeyGone(self.server, f"lock:{name}")

    def test_inspection_output_that_cannot_be_written_exits_70(self):
        self.server.command("SET", "lock:x", "tok", "PX", "60000")
        for args in (["status", "x"], ["list"], ["status", "--json", "x"]):
            with self.subTest(args=args):
                with open("/dev/full", "w") as out:
                    cp = subprocess.run([REDLOCK_BIN, "-s", self.url, *args], stdout=out,
                                        stderr=subprocess.PIPE, env=self.env(), timeout=30 * SLACK)
                self.assertEqual(cp.returncode, 70)
                self.assertIn(b"write error on standard output", cp.stderr)

    def acquire(self, name, *args, key_option=False):
        r = self.redlock([self.url], "acquire", *(["-k", name] if key_option else [name]),
                         *args)
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout.count("\n"), 1, r)
        token = r.stdout.strip()
        self.assertRegex(token, TOKEN)
        self.assertEqual(self.server.command("GET", "lock:" + name), token)
        return token

    def round_trip(self, name, key_option):
        def name_args():
            return ["-k", name] if key_option else [name]
        key, meta = "lock:" + name, "{lock:" + name + "}:meta"

        token = self.acquire(name, "-t", "10m", key_option=key_option)
        self.assertTrue(570_000 < self.pttl(key) <= 600_000, self.pttl(key))
        self.assertTrue(570_000 < self.pttl(meta) <= 600_000, self.pttl(meta))

        # It shows in status as held with that token, by the process that ran acquire.
        lock = self.status_json([self.url], name, key_option=key_option)
        self.assertEqual(lock["state"], "held")
        self.assertEqual(lock["token_prefix"], token[:8])
        self.assertEqual(lock["holder"]["pid"], os.getpid())
        self.assertEqual(lock["holder"]["host"], socket.gethostname())

        # acquire -n on a held lock: 75, or the -E status; the key is untouched.
        r = self.redlock([self.url], "acquire", *name_args(), "-n")
        self.assertStatus(r, 75)
        self.assertEqual(r.stdout, "")
        self.assertMessages(r.stderr)
        r = self.redlock([self.url], "acquire", *name_args(), "-n", "-E", "3")
        self.assertStatus(r, 3)
        r = self.redlock([self.url], "acquire", *name_args(), "-w", "300ms")
        self.assertStatus(r, 75)
        self.assertEqual(self.server.command("GET", key), token)

        # extend raises the TTL.
        r = self.redlock([self.url], "extend", *name_args(), "--token", token, "-t", "20m")
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, "")
        self.assertTrue(1_170_000 < self.pttl(key) <= 1_200_000, self.pttl(key))
        self.assertTrue(1_170_000 < self.pttl(meta) <= 1_200_000, self.pttl(meta))

        # A wrong token is refused and changes nothing.
        wrong = "0" * 32
        r = self.redlock([self.url], "extend", *name_args(), "--token", wrong, "-t", "1h")
        self.assertStatus(r, 75)
        self.assertMessages(r.stderr)
        self.assertLessEqual(self.pttl(key), 1_200_000)
        r = self.redlock([self.url], "release", *name_args(), "--token", wrong)
        self.assertStatus(r, 75)
        self.assertMessages(r.stderr)
        self.assertEqual(self.server.command("GET", key), token)
        self.assertEqual(self.server.command("EXISTS", meta), 1)

        # The right token releases it: key and metadata gone.
        r = self.redlock([self.url], "release", *name_args(), "--token", token)
        self.assertStatus(r, 0)
        self.assertKeyGone(self.server, key)
        self.assertKeyGone(self.server, meta)
        # Released twice, or extended after release: no longer ours.
        r = self.redlock([self.url], "release", *name_args(), "--token", token)
        self.assertStatus(r, 75)
        r = self.redlock([self.url], "extend", *name_args(), "--token", token)
        self.assertStatus(r, 75)
        self.assertKeyGone(self.server, key)

    def test_round_trip_with_a_positional_name(self):
        self.round_trip("script-job", key_option=False)

    def test_round_trip_with_key_option(self):
        self.round_trip("script-job-k", key_option=True)

    def test_acquire_json(self):
        r = self.redlock([self.url], "acquire", "--json", "j", "-t", "5s")
        self.assertStatus(r, 0)
        doc = self.json_of(r)
        self.assertEqual(doc["name"], "j")
        self.assertEqual(doc["key"], "lock:j")
        self.assertRegex(doc["token"], TOKEN)
        self.assertEqual(doc["ttl_ms"], 5000)
        self.assertIsoRecent(doc["acquired_at"])
        self.assertEqual(self.server.command("GET", "lock:j"), doc["token"])
        self.assertTrue(0 < self.pttl("lock:j") <= 5000)

    def test_acquire_waits_for_a_release(self):
        token = self.acquire("w", "-t", "1m")
        waiter = self.start_redlock(["-s", self.url, "acquire", "w", "-w", "20s"])
        self.assertIsNone(waiter.poll())
        r = self.redlock([self.url], "release", "w", "--token", token)
        self.assertStatus(r, 0)
        self.assertEqual(waiter.wait(30.0), 0, waiter.stderr)
        new = waiter.stdout.strip()
        self.assertRegex(new, TOKEN)
        self.assertNotEqual(new, token)
        self.assertEqual(self.server.command("GET", "lock:w"), new)

    def test_a_foreign_lock_excludes_acquire_and_is_not_released_by_a_wrong_token(self):
        self.server.command("SET", "lock:py", "py-token", "NX", "PX", "60000")
        r = self.redlock([self.url], "acquire", "py", "-n")
        self.assertStatus(r, 75)
        r = self.redlock([self.url], "release", "py", "--token", "other")
        self.assertStatus(r, 75)
        e = self.redlock([self.url], "extend", "py", "--token", "other")
        self.assertStatus(e, 75)
        self.assertEqual(e.stderr, r.stderr)  # the same situation, the same message
        self.assertEqual(self.server.command("GET", "lock:py"), "py-token")
        r = self.redlock([self.url], "release", "py", "--token", "py-token")
        self.assertStatus(r, 0)
        self.assertKeyGone(self.server, "lock:py")

    def test_release_needs_token_or_force(self):
        r = self.redlock([self.url], "release", "x")
        self.assertStatus(r, 64)
        self.assertMessages(r.stderr)
        r = self.redlock([self.url], "extend", "x")
        self.assertStatus(r, 64)

    def test_server_down_exits_69(self):
        url, name = self.dead_server_url()
        for args in (["acquire", "x", "-n"], ["extend", "x", "--token", "t"],
                     ["release", "x", "--token", "t"]):
            with self.subTest(args=args):
                r = self.redlock([url], *args)
                self.assertStatus(r, 69)
                self.assertIn(name, r.stderr)
                self.assertMessages(r.stderr)


class HostileBytesTest(InspectTestBase):
    """What other clients and servers write is shown, never obeyed: JSON stays valid UTF-8
    (a byte that is not UTF-8 becomes U+FFFD) and text output escapes control characters
    (\\n, \\x1b) and bytes that are not UTF-8 (\\xff), so nothing forges a line or drives
    the terminal."""

    COMMAND = b"sleep 1 \xff\xfe \x1b[2J\n  token     forged-token"

    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()
        # A foreign lock whose value is not UTF-8, and a lock whose metadata is hostile.
        self.server.command("SET", "lock:odd", b"\xff\x01tok", "PX", "60000")
        self.server.command("SET", "lock:meta", "t0ken", "PX", "60000")
        self.server.command("HSET", "{lock:meta}:meta", "token", "t0ken", "host", b"h\x1bost",
                            "pid", "7", "user", b"u\xc3", "command", self.COMMAND,
                            "acquired_at", "2026-12-02T14:28:16.411Z", "ttl_ms", "60000")

    def strict_json(self, result):
        try:
            return json.loads(result.stdout_bytes.decode("utf-8", "strict"))
        except ValueError as e:
            self.fail(f"stdout is not valid UTF-8 JSON ({e}): {result.stdout_bytes!r}")

    def assertTerminalSafe(self, result):
        out = result.stdout_bytes
        self.assertNotIn(b"\x1b", out)
        self.assertNotIn(b"\xff", out)
        out.decode("utf-8", "strict")
        for line in out.decode().splitlines():
            self.assertFalse(line.lstrip().startswith("token     forged"), out)

    def test_json_output_is_valid_utf8(self):
        r = self.redlock([self.url], "status", "--json", "odd", "meta")
        self.assertStatus(r, 0)
        odd, meta = self.strict_json(r)["locks"]
        self.assertEqual(odd["token_prefix"], "\ufffd\x01tok")
        self.assertEqual(meta["holder"]["command"],
                         "sleep 1 \ufffd\ufffd \x1b[2J\n  token     forged-token")
        self.assertEqual(meta["holder"]["user"], "u\ufffd")
        r = self.redlock([self.url], "list", "--json")
        self.assertStatus(r, 0)
        self.assertEqual(len(self.strict_json(r)["locks"]), 2)

    def test_text_output_escapes_control_characters_and_bad_bytes(self):
        r = self.redlock([self.url], "status", "odd", "meta")
        self.assertStatus(r, 0)
        self.assertTerminalSafe(r)
        self.assertIn("  token     \\xff\\x01tok\n", r.stdout)
        self.assertIn("  command   sleep 1 \\xff\\xfe \\x1b[2J\\n  token     forged-token\n",
                      r.stdout)
        self.assertIn("held by u\\xc3@h\\x1bost (pid 7)", r.stdout)
        self.assertEqual([l for l in r.stdout.splitlines() if l.startswith("  token ")],
                         ["  token     \\xff\\x01tok", "  token     t0ken"])
        r = self.redlock([self.url], "list")
        self.assertStatus(r, 0)
        self.assertTerminalSafe(r)
        self.assertEqual(len(r.stdout.splitlines()), 3, r.stdout)

    def test_forced_release_shows_the_holder_escaped(self):
        r = self.redlock([self.url], "release", "meta", "--force", "--yes")
        self.assertStatus(r, 0)
        self.assertTerminalSafe(r)
        self.assertEqual(len(r.stdout.splitlines()), 1, r.stdout)
        self.assertKeyGone(self.server, "lock:meta")

    def test_a_garbage_acquired_at_is_shown_as_it_is_without_an_age(self):
        # Year 9999 used to overflow system_clock's nanoseconds ("held 74230d", UBSan).
        # Not a time, a time in the future (no age either), garbage.
        for when in ("9999-99-99T99:99:99.999Z", "9999-12-31T23:59:59.999Z", "yesterday"):
            with self.subTest(acquired_at=when):
                self.server.command("HSET", "{lock:meta}:meta", "acquired_at", when)
                r = self.redlock([self.url], "status", "meta")
                self.assertStatus(r, 0)
                self.assertIn(f"  since     {when}\n", r.stdout)
                r = self.redlock([self.url], "list")
                self.assertStatus(r, 0)
                self.assertRegex(r.stdout, r"\nmeta +\S+ +\S+ +- ")
                r = self.redlock([self.url], "status", "--json", "meta")
                self.assertEqual(self.strict_json(r)["locks"][0]["holder"]["acquired_at"], when)

    def test_a_hostile_server_error_keeps_doctor_json_valid_and_stderr_one_line(self):
        fake = self.fake_redis(lambda args: b"-ERR \xff\xfe \x1b[31mboom\nforged line\r\n")
        for args in (["doctor", "--json"], ["doctor"], ["status", "x"], ["status", "--json", "x"]):
            with self.subTest(args=args):
                r = self.redlock([fake.url()], *args)
                self.assertIn(r.returncode, (1, 69), r)
                self.assertNotIn(b"\x1b", r.stdout_bytes)
                self.assertMessages(r.stderr)
                self.assertNotIn("\x1b", r.stderr)
                if r.returncode == 69:
                    self.assertEqual(r.stdout_bytes, b"")  # nothing was read
                elif "--json" in args:
                    self.strict_json(r)
                else:
                    self.assertTerminalSafe(r)


class BadServersTest(InspectTestBase):
    """Servers and keys that are not what a lock expects."""

    def test_a_lock_key_of_the_wrong_type_is_reported_and_can_be_forced_away(self):
        server = self.redis_server()
        url = server.url()
        server.command("HSET", "lock:hashed", "field", "value")
        r = self.redlock([url], "status", "hashed")
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, "hashed: not a redlock lock (wrong type), no expiry\n")
        lock = self.status_json([url], "hashed")
        self.assertEqual((lock["state"], lock["wrong_type"], lock["token_prefix"], lock["holder"]),
                         ("held", True, None, None))
        self.assertEqual(lock["servers"][0]["state"], "wrong_type")
        self.assertIsNone(lock["servers"][0]["error"])
        r = self.redlock([url], "list")
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"\nhashed +- +\(wrong type\) ")
        # With another server down, it is one server's view, not an outage.
        dead, _ = self.dead_server_url()
        r = self.redlock([url, dead], "status", "hashed")
        self.assertStatus(r, 0)
        self.assertIn("not a redlock lock (wrong type)", r.stdout)

        r = self.redlock([url], "release", "hashed", "--force", "--yes")
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, "released 'hashed': held by a key that is "
                                   "not a redlock lock (wrong type)\n")
        self.assertEqual(server.command("EXISTS", "lock:hashed"), 0)
        # A string under the key again is a lock like any other.
        server.command("SET", "lock:hashed", "tok", "PX", "60000")
        self.assertEqual(self.status_json([url], "hashed")["wrong_type"], False)

    def test_list_gives_up_on_a_scan_cursor_that_is_not_a_number(self):
        def reply(args):
            if args and args[0].upper() == b"SCAN":
                return b"*2\r\n$3\r\nabc\r\n*1\r\n$8\r\nlock:odd\r\n"
            return b"-ERR unknown command\r\n"

        fake = self.fake_redis(reply)
        for args in (["list"], ["list", "--json"]):
            with self.subTest(args=args):
                before = len(fake.commands)
                r = self.redlock([fake.url()], *args, timeout=10.0)
                self.assertStatus(r, 69)
                self.assertIn("unexpected reply to SCAN (cursor", r.stderr)
                scans = [c for c in fake.commands[before:] if c[0].upper() == b"SCAN"]
                self.assertEqual(len(scans), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
