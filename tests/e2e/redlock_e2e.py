"""Helpers for redlock's end-to-end tests (stdlib only).

Every test drives the built binary ($REDLOCK_BIN) as a user would, against a real
redis-server ($REDIS_SERVER) that the test starts on loopback and always stops. Nothing
here touches port 6379 or a user's config: HOME and XDG_CONFIG_HOME point at a temp dir.

Waiting is always "poll a condition until a deadline", never "sleep and hope"; the
deadlines are generous (a loaded 2-core machine running sanitizer builds must pass).
"""

import atexit
import ctypes
import os
import queue
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import weakref

# Multiplies every deadline; raise it on a very slow machine.
SLACK = float(os.environ.get("REDLOCK_E2E_SLACK", "1"))

HERE = os.path.dirname(os.path.abspath(__file__))
# "redlock: lowercase text[: cause]". The text may open with where the problem is: a
# config file's "FILE:LINE:COL: " (the contract asks for it) or an option's name
# ("--key is required"); what follows still starts in lowercase (or a quoted name).
MESSAGE_LINE = re.compile(r"""^redlock: (?:[^\s:]+:\d+:\d+: )?(?:--?[a-z][a-z-]*:? )?['"a-z]""")


def _find_redlock():
    path = os.environ.get("REDLOCK_BIN")
    if path:
        return path
    root = os.path.dirname(os.path.dirname(HERE))
    for build in ("build-e2e", "build"):
        candidate = os.path.join(root, build, "redlock")
        if os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("set REDLOCK_BIN to the redlock binary")


def _find_redis_server():
    return os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"


REDLOCK_BIN = _find_redlock()
REDIS_SERVER_BIN = _find_redis_server()
_server_version = None


def server_version():
    """The Redis version REDIS_SERVER_BIN answers as, (major, minor), from its --version:
    "Redis server v=6.0.16 ..."; Valkey answers as the Redis 7.2 its INFO names."""
    global _server_version
    if _server_version is None:
        out = subprocess.run([REDIS_SERVER_BIN, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
        found = re.search(r"v=(\d+)\.(\d+)", out)
        if not found:
            raise RuntimeError(f"{REDIS_SERVER_BIN} --version says no version: {out!r}")
        _server_version = (7, 2) if out.startswith("Valkey") else tuple(map(int, found.groups()))
    return _server_version

# ACL rules that let a user take locks under the default prefix: the lock key itself and,
# per the contract, the "{lock:NAME}:suffix" keys a lock may need besides it.
LOCK_ACL_RULES = "on ~lock:* ~{lock:*}:* +@all"

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL if this test process dies (CTest timeout)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _child_setup(cgroup):
    """preexec_fn: _die_with_parent, and with `cgroup` (a cgroup v2 directory) moves the
    child into it."""
    if cgroup is None:
        return _die_with_parent

    def setup():
        _die_with_parent()
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write("0")
    return setup


# ---------------------------------------------------------------------------------------
# Waiting


class Timeout(AssertionError):
    pass


def wait_until(predicate, timeout=10.0, interval=0.01, message="condition", proc=None):
    """Polls predicate() every `interval` s until it returns something truthy (returned)
    or `timeout`*SLACK seconds pass (AssertionError). With `proc` (a RedlockProcess), fails
    early when that process exits first."""
    deadline = time.monotonic() + timeout * SLACK
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            value = predicate()
            if value:
                return value
            raise AssertionError(
                f"redlock exited with {proc.returncode} before {message}; "
                f"stderr: {proc.stderr!r}")
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout * SLACK:.1f}s waiting for {message}")
        time.sleep(interval)


def pid_alive(pid):
    """True while process `pid` exists and is not dead: a zombie is dead, unless it is a
    leader whose other threads live on (its main thread called pthread_exit)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state follows the last ')' (the command name may contain one); num_threads is
    # the 20th field, the 18th from the state.
    fields = stat[stat.rindex(b")") + 2:].split()
    return fields[0] not in (b"Z", b"X") or (fields[0] == b"Z" and int(fields[17]) > 1)


def read_pid_file(path, timeout=10.0, proc=None):
    """Waits until `path` holds a pid (a whole line) and returns it."""
    def read():
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        return int(text) if text.endswith("\n") and text.strip().isdigit() else None
    return wait_until(read, timeout, message=f"pid in {path}", proc=proc)


def _rmdir_quietly(path):
    """Removes the empty directory `path`; True once it is gone."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def redlock_pid(popen):
    """The pid of the redlock that `popen` started, maybe behind a prefix (faketime forks
    its command rather than exec it, and dies of a signal meant for redlock); popen's own
    when none is found."""
    pid = popen.pid
    for _ in range(5):
        try:
            if os.path.samefile(f"/proc/{pid}/exe", REDLOCK_BIN):
                return pid
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                pid = int(f.read().split()[0])
        except (OSError, IndexError):
            break
    return popen.pid


def captured_text(f):
    """What a process wrote so far to `f`, a file its output goes to."""
    f.flush()
    with open(f.name, "rb") as r:
        return r.read().decode("utf-8", "replace")


def kill_quietly(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def free_port():
    """A loopback port that was free a moment ago (never 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 6379:
            return port


# ---------------------------------------------------------------------------------------
# A minimal RESP2 client


class RedisError(Exception):
    """An error reply from the server."""


class RespClient:
    def __init__(self, address, timeout=5.0):
        """address: ("127.0.0.1", port) or a unix socket path."""
        if isinstance(address, str):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(timeout * SLACK)
        try:
            self.sock.connect(address)
        except OSError:
            self.sock.close()
            raise
        self.buf = b""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def execute(self, *args):
        """Sends one command; returns str/int/None/list, raises RedisError on an error
        reply."""
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            if isinstance(arg, str):
                arg = arg.encode("utf-8", "surrogateescape")
            elif isinstance(arg, int):
                arg = str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
        self.sock.sendall(b"".join(out))
        reply = self._read_reply()
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def _read_line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _read_reply(self):
        line = self._read_line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode("utf-8", "surrogateescape")
        if kind == b"-":
            return RedisError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            return self._read_exact(n).decode("utf-8", "surrogateescape")
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            items = []
            for _ in range(n):
                item = self._read_reply()
                items.append(item)
            return items
        raise ConnectionError(f"bad RESP reply: {line!r}")


# ---------------------------------------------------------------------------------------
# redis-server

_live_servers = weakref.WeakSet()


@atexit.register
def _stop_all_servers():
    for server in list(_live_servers):
        server.stop()


class RedisServer:
    """A redis-server on loopback (free port, or a unix socket in a temp dir), stopped by
    stop() — registered with atexit and, through E2ETest.redis_server, addCleanup."""

    def __init__(self, unix_socket=False, requirepass=None, acl_user=None, extra_args=()):
        """acl_user: (name, password, rules), rules like "on ~lock:* +@all"; the password
        is added as ">password"."""
        self.unix_socket = unix_socket
        self.requirepass = requirepass
        self.acl_user = acl_user
        self.extra_args = list(extra_args)
        self.dir = tempfile.mkdtemp(prefix="redlock-e2e-redis-")
        self.socket_path = os.path.join(self.dir, "redis.sock") if unix_socket else None
        self.port = 0
        self.proc = None
        self.frozen = False
        self._log = None
        _live_servers.add(self)
        for _ in range(5):
            if not unix_socket:
                self.port = free_port()
            if self._try_start():
                return
        log = self.log_tail()
        self.stop()
        raise RuntimeError(f"redis-server did not start; log:\n{log}")

    # -- addresses

    @property
    def address(self):
        return self.socket_path if self.unix_socket else ("127.0.0.1", self.port)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def url(self, username=None, password=None, db=None):
        """The URL for `-s`: redis://[[user]:password@]127.0.0.1:PORT[/db] or
        unix://PATH[?db=N]."""
        if self.unix_socket:
            return f"unix://{self.socket_path}" + (f"?db={db}" if db is not None else "")
        auth = ""
        if password is not None:
            auth = f"{username or ''}:{password}@"
        elif username is not None:
            auth = f"{username}@"
        return f"redis://{auth}127.0.0.1:{self.port}" + (f"/{db}" if db is not None else "")

    # -- lifecycle

    def _command_line(self):
        args = [REDIS_SERVER_BIN,
                "--port", str(0 if self.unix_socket else self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                "--dir", self.dir]
        if self.unix_socket:
            args += ["--unixsocket", self.socket_path, "--unixsocketperm", "700"]
        if self.requirepass is not None:
            args += ["--requirepass", self.requirepass]
        if self.acl_user is not None:
            name, password, rules = self.acl_user
            args += ["--user", name] + rules.split() + [">" + password]
        return args + self.extra_args

    def _try_start(self):
        if self._log is None:
            self._log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(self._command_line(), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)
        self.frozen = False
        deadline = time.monotonic() + 5 * SLACK
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                return False  # e.g. someone took the port meanwhile
            if self._answers():
                return True
            time.sleep(0.01)
        self.kill()
        return False

    def _answers(self):
        """True when *our* process answers (not another server on a reused port)."""
        try:
            with self.client(timeout=1.0) as c:
                info = c.execute("INFO", "server")
        except (OSError, RedisError):
            return False
        return f"process_id:{self.proc.pid}\r\n" in info

    def freeze(self):
        """SIGSTOP; returns once the server is stopped."""
        if self.proc is None or self.frozen:
            return
        os.kill(self.proc.pid, signal.SIGSTOP)
        _, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        if os.WIFSTOPPED(status):
            self.frozen = True
        else:  # it died instead; let Popen know
            self.proc.returncode = os.waitstatus_to_exitcode(status)
            self.proc = None

    def thaw(self):
        if self.proc is None or not self.frozen:
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.frozen = False

    def kill(self):
        """SIGKILL and reap."""
        if self.proc is None:
            return
        kill_quietly(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        self.frozen = False

    def restart(self):
        """Kill if running and start again on the same address (an empty dataset)."""
        self.kill()
        for _ in range(5):
            if self._try_start():
                return
            time.sleep(0.1)
        raise RuntimeError(f"redis-server did not restart; log:\n{self.log_tail()}")

    def stop(self):
        self.thaw()
        self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None
        shutil.rmtree(self.dir, ignore_errors=True)
        _live_servers.discard(self)

    def log_tail(self, lines=20):
        try:
            with open(os.path.join(self.dir, "redis.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- commands for assertions

    def client(self, db=0, timeout=5.0, auth=True):
        c = RespClient(self.address, timeout)
        try:
            if auth and self.requirepass is not None:
                c.execute("AUTH", self.requirepass)
            if db:
                c.execute("SELECT", db)
        except BaseException:
            c.close()
            raise
        return c

    def command(self, *args, db=0):
        """One command on a fresh connection as the default user."""
        with self.client(db=db) as c:
            return c.execute(*args)

    def commandstats(self):
        """INFO commandstats as {command: {"calls": ..., ...}} (scripts' calls included)."""
        info = self.command("INFO", "commandstats")
        if isinstance(info, bytes):
            info = info.decode()
        stats = {}
        for line in info.splitlines():
            if line.startswith("cmdstat_"):
                name, _, fields = line[len("cmdstat_"):].partition(":")
                stats[name] = dict(f.split("=", 1) for f in fields.split(","))
        return stats


class SentinelServer(RedisServer):
    """A Redis Sentinel on loopback monitoring MASTER (a RedisServer) as `name`, with
    quorum 1 and the shortest timeouts, so that it fails over about a second after the
    master stops answering."""

    def __init__(self, master, name="mymaster", extra_config=""):
        self.master = master
        self.name = name
        self.extra_config = extra_config
        super().__init__()

    def _command_line(self):
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:  # sentinel rewrites it: written afresh at each start
            f.write(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
                    f"sentinel monitor {self.name} 127.0.0.1 {self.master.port} 1\n"
                    f"sentinel down-after-milliseconds {self.name} 1000\n"
                    f"sentinel failover-timeout {self.name} 5000\n{self.extra_config}")
        return [REDIS_SERVER_BIN, conf, "--sentinel"]

    def master_address(self):
        reply = self.command("SENTINEL", "get-master-addr-by-name", self.name)
        return None if reply is None else (str(reply[0]), int(reply[1]))

    def url(self, *sentinels):
        hosts = ",".join([f"127.0.0.1:{self.port}", *sentinels])
        return f"redis-sentinel://{hosts}#{self.name}"


class RedisCluster:
    """Three redis-server --cluster-enabled masters on loopback, joined with
    `redis-cli --cluster create`, each serving a third of the slots. stop() stops them."""

    def __init__(self, masters=3, tls_args=None):
        """tls_args: the --tls-* options of a cluster that also speaks TLS (each node then
        has a tls_port, and the cluster's bus and redirections to TLS clients use TLS)."""
        self.nodes = []
        try:
            for _ in range(masters):
                extra = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                         "--cluster-node-timeout", "2000"]
                tls_port = None
                if tls_args:
                    # The cluster bus listens 10000 above it.
                    tls_port = next(p for p in iter(free_port, None) if p <= 55535)
                    extra += ["--tls-port", str(tls_port), "--tls-cluster", "yes", *tls_args]
                node = RedisServer(extra_args=extra)
                node.tls_port = tls_port
                self.nodes.append(node)
            subprocess.run(["redis-cli", "--cluster", "create",
                            *[f"127.0.0.1:{n.port}" for n in self.nodes], "--cluster-yes"],
                           check=True, capture_output=True, timeout=60)
            wait_until(lambda: all(b"cluster_state:ok" in self._info(n) for n in self.nodes),
                       30, interval=0.1, message="the cluster to be ok")
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _info(node):
        reply = node.command("CLUSTER", "INFO")
        return reply if isinstance(reply, bytes) else reply.encode()

    def node_id(self, node):
        return str(node.command("CLUSTER", "MYID"))

    def slot_of(self, key):
        return int(self.nodes[0].command("CLUSTER", "KEYSLOT", key))

    def owner(self, key):
        """The node serving KEY's slot."""
        slot = self.slot_of(key)
        for start, end, master, *_ in self.nodes[0].command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                # Redis 6 names a TLS cluster's nodes by their TLS port.
                return next(n for n in self.nodes if int(master[1]) in (n.port, n.tls_port))
        raise AssertionError(f"no owner of slot {slot}")

    def name_on(self, node, prefix="lock:", stem="n"):
        """A lock name whose keys live on NODE."""
        for i in range(10000):
            if self.owner(f"{prefix}{stem}{i}") is node:
                return f"{stem}{i}"
        raise AssertionError("no name hashes there")

    def migrate(self, slot, source, target, finish=True):
        """Moves SLOT's keys from SOURCE to TARGET; with `finish`, TARGET then owns it (MOVED
        from the others), else SOURCE still does (ASK while migrating)."""
        target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
        keys = source.command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        if keys:
            source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        if finish:
            self.finish_migration(slot, target)

    def finish_migration(self, slot, target):
        for node in [target] + [n for n in self.nodes if n is not target]:
            node.command("CLUSTER", "SETSLOT", slot, "NODE", self.node_id(target))

    def stop(self):
        for node in self.nodes:
            node.stop()


class FakeRedis:
    """A hostile "Redis server" on loopback: it reads RESP commands and answers each with
    reply(args), args being the command's words as bytes, the answer raw RESP bytes (None
    closes the connection), or an iterable of them, sent one after the other for as long
    as it yields them and the peer reads (a flood, or bytes trickling forever). Stopped by
    stop() (E2ETest.fake_redis registers it)."""

    def __init__(self, reply):
        self.reply = reply
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.commands = []  # every command received, in order
        self._stopped = False
        self._conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def _accept(self):
        while not self._stopped:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        f = conn.makefile("rb")
        try:
            while True:
                line = f.readline()
                if not line:
                    return
                if line.startswith(b"*"):
                    args = []
                    for _ in range(int(line[1:])):
                        n = int(f.readline()[1:])
                        args.append(f.read(n + 2)[:n])
                else:
                    args = line.split()
                self.commands.append(args)
                answer = self.reply(args)
                if answer is None:
                    return
                if isinstance(answer, (bytes, bytearray)):
                    conn.sendall(answer)
                    continue
                for chunk in answer:
                    if self._stopped:
                        return
                    conn.sendall(chunk)
        except (OSError, ValueError):
            return
        finally:
            f.close()
            conn.close()

    def stop(self):
        self._stopped = True
        self.listener.close()
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class DelayProxy:
    """A TCP proxy on loopback that holds every chunk for `delay` seconds in each
    direction, so a round trip through it takes 2 * delay more. `delay` may be changed
    while connections are open (it applies to chunks read from then on)."""

    def __init__(self, target, delay):
        self.target = target
        self.delay = delay
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._stopped = False
        self._socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def _accept(self):
        while not self._stopped:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(self.target)
            except OSError:
                return
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks += [client, upstream]
            self._pipe(client, upstream)
            self._pipe(upstream, client)

    def _pipe(self, src, dst):
        chunks = queue.Queue()

        def read():
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + self.delay, data))
                if not data:
                    return

        def write():
            while True:
                due, data = chunks.get()
                time.sleep(max(0.0, due - time.monotonic()))
                if not data:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def stop(self):
        self._stopped = True
        self.listener.close()
        for sock in self._socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


# ---------------------------------------------------------------------------------------
# redlock


# A name's record, {<prefix><NAME>}:fence (src/lock/scripts.hpp has its fields): its fence
# counters, history, counters and --once-per record, in one hash.
ENTRY_FIELDS = ("run", "started_ms", "waited_ms", "held_ms", "outcome", "status", "fence",
                "slot_ms", "host", "pid", "user", "command", "by_host", "by_pid", "by_user",
                "note")


def record_key(name, prefix="lock:"):
    return "{" + prefix + name + "}:fence"


def record_of(server, name, prefix="lock:"):
    """The record of `name` on `server` as a dict of its fields ({} when there is none)."""
    got = server.command("HGETALL", record_key(name, prefix)) or []
    return dict(zip(got[0::2], got[1::2]))


def _unblob(record, name):
    text = ""
    for piece in (name, name + ":2", name + ":3", name + ":4"):
        if not record.get(piece):
            break
        text += record[piece]
    if not text:
        return None
    values = text.split("\0")
    return {f: v for f, v in zip(ENTRY_FIELDS, values) if v}


def entries_of(server, name, prefix="lock:"):
    """The history entries of `name` on `server` as dicts, oldest first."""
    record = record_of(server, name, prefix)
    out = []
    head = record.get("h", "").split()
    if len(head) >= 2:
        for n in range(int(head[0]), int(head[1]) + 1):
            e = _unblob(record, str(n))
            if e is not None:
                out.append(e)
    newest = _unblob(record, "e")
    if newest is not None:
        out.append(newest)
    return out


def append_entries(server, name, entries, prefix="lock:"):
    """Writes `entries` (dicts of ENTRY_FIELDS) to the history in the record of `name` on
    `server`, oldest first, each one the newest in turn, as redlock's history script lays them
    out (each entry one field, however long: readers join a field's pieces)."""
    record = record_of(server, name, prefix)
    head = record.get("h", "").split()
    first, last = (int(head[0]), int(head[1])) if len(head) >= 2 else (None, 0)
    newest = "".join(record.get(p, "") for p in ("e", "e:2", "e:3", "e:4")) or None
    fields = {"e:2": "", "e:3": "", "e:4": ""}
    for entry in entries:
        if newest is not None:
            last += 1
            first = first or last
            fields[str(last)] = newest
        values = [str(entry.get(f, "")) for f in ENTRY_FIELDS]
        while len(values) > 1 and values[-1] == "":
            values.pop()
        newest = "\0".join(values)
    fields["e"] = newest
    if first is not None:
        fields["h"] = f"{first} {last} 1000000"
    args = [w for kv in fields.items() for w in kv]
    for i in range(0, len(args), 20000):
        server.command("HSET", record_key(name, prefix), *args[i:i + 20000])


def isolated_env(home, extra=None):
    """The environment for redlock: a private HOME and XDG_CONFIG_HOME, no REDLOCK_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDLOCK_")}
    env["HOME"] = home
    env["XDG_CONFIG_HOME"] = os.path.join(home, ".config")
    env.pop("REDLOCK_CONFIG", None)
    if extra:
        env.update(extra)
    return env


class RedlockProcess:
    """A running redlock with stdout/stderr captured to files (no pipe can fill up)."""

    def __init__(self, args, env, cwd, stdin=None, pass_fds=(), cgroup=None):
        self.args = [REDLOCK_BIN] + list(args)
        self.dir = tempfile.mkdtemp(prefix="redlock-e2e-proc-")
        self._out = open(os.path.join(self.dir, "stdout"), "w+b")
        self._err = open(os.path.join(self.dir, "stderr"), "w+b")
        self.started = time.monotonic()
        self.ended = None
        try:
            self.popen = subprocess.Popen(
                self.args, env=env, cwd=cwd,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=self._out, stderr=self._err, pass_fds=pass_fds,
                preexec_fn=_child_setup(cgroup))
        except BaseException:
            self._out.close()
            self._err.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    @property
    def pid(self):
        return self.popen.pid

    @property
    def returncode(self):
        return self.popen.returncode

    def poll(self):
        rc = self.popen.poll()
        if rc is not None and self.ended is None:
            self.ended = time.monotonic()
        return rc

    def wait(self, timeout=30.0):
        """Waits for exit (AssertionError after timeout*SLACK s) and returns the status."""
        try:
            rc = self.popen.wait(timeout * SLACK)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"redlock still running after {timeout * SLACK:.1f}s: {self.args}; "
                f"stderr so far: {self.stderr!r}") from None
        if self.ended is None:
            self.ended = time.monotonic()
        return rc

    @property
    def elapsed(self):
        return (self.ended or time.monotonic()) - self.started

    @property
    def stdout(self):
        return captured_text(self._out)

    @property
    def stderr(self):
        return captured_text(self._err)

    def send_signal(self, sig):
        self.popen.send_signal(sig)

    def cleanup(self):
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()
        self._out.close()
        self._err.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Result:
    def __init__(self, returncode, stdout, stderr, elapsed, args, stdout_bytes=b""):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.elapsed = elapsed
        self.args = args
        self.stdout_bytes = stdout_bytes  # as written, before decoding

    def __repr__(self):
        return (f"Result(rc={self.returncode}, elapsed={self.elapsed:.2f}s, "
                f"stdout={self.stdout!r}, stderr={self.stderr!r}, args={self.args!r})")


# A PROGRAM for `redlock run` that records what it sees and holds the lock until told:
#   $1 = its directory; $2 = exit code.
# It writes token, key, fence, nesting secret and pid atomically (write + mv), then
# "ready", waits for "go", writes "done" and exits. "done" existing means PROGRAM is about to exit; while it does
# not, the lock must be held. Meanwhile it runs each script written to "request" (a
# process of its own tree: a nested run), its outputs and status in "reply.*".
HOLDER_SCRIPT = r'''
d=$1
printf '%s' "$REDLOCK_TOKEN" > "$d/token.tmp" && mv "$d/token.tmp" "$d/token"
printf '%s' "$REDLOCK_KEY" > "$d/key.tmp" && mv "$d/key.tmp" "$d/key"
printf '%s' "$REDLOCK_FENCE" > "$d/fence.tmp" && mv "$d/fence.tmp" "$d/fence"
printf '%s' "$REDLOCK_NEST_SECRET" > "$d/secret.tmp" && mv "$d/secret.tmp" "$d/secret"
echo $$ > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"
: > "$d/ready"
while [ ! -e "$d/go" ]; do
    if [ -e "$d/request" ]; then
        sh "$d/request" > "$d/reply.out" 2> "$d/reply.err"
        echo $? > "$d/reply.tmp"
        rm -f "$d/request"
        mv "$d/reply.tmp" "$d/reply.status"
    fi
    sleep 0.02
done
: > "$d/done"
exit "$2"
'''


def run_in_holder_script(d, words, timeout=60.0, proc=None):
    """Runs the command `words` in the tree of the HOLDER_SCRIPT serving directory `d` (its
    child); returns a Result. `proc`: the process whose exit fails the wait early."""
    for name in ("reply.status", "reply.out", "reply.err"):
        if os.path.exists(os.path.join(d, name)):
            os.unlink(os.path.join(d, name))
    started = time.monotonic()
    with open(os.path.join(d, "request.tmp"), "w") as f:
        f.write("exec " + " ".join(shlex.quote(w) for w in words) + "\n")
    os.rename(os.path.join(d, "request.tmp"), os.path.join(d, "request"))
    status = os.path.join(d, "reply.status")
    wait_until(lambda: os.path.exists(status), timeout, message="the run inside the holder",
               proc=proc)

    def read(name):
        with open(os.path.join(d, name)) as f:
            return f.read()
    return Result(int(read("reply.status")), read("reply.out"), read("reply.err"),
                  time.monotonic() - started, words)


class Holder:
    """`redlock run ... -- sh -c HOLDER_SCRIPT` in the background."""

    def __init__(self, test, run_args, exit_code=0, global_args=(), env=None):
        self.test = test
        self.dir = test.mkdtemp("holder-")
        self.proc = test.start_redlock(
            list(global_args) + ["run"] + list(run_args) +
            ["--", "sh", "-c", HOLDER_SCRIPT, "sh", self.dir, str(exit_code)], env=env)

    def path(self, name):
        return os.path.join(self.dir, name)

    def wait_ready(self, timeout=15.0):
        wait_until(lambda: os.path.exists(self.path("ready")), timeout,
                   message="the holder's PROGRAM to start", proc=self.proc)
        return self

    @property
    def started(self):
        return os.path.exists(self.path("ready"))

    @property
    def done(self):
        return os.path.exists(self.path("done"))

    def _file(self, name):
        with open(self.path(name)) as f:
            return f.read()

    @property
    def token(self):
        return self._file("token")

    @property
    def key(self):
        return self._file("key")

    @property
    def fence(self):
        return int(self._file("fence"))

    @property
    def program_pid(self):
        return int(self._file("pid"))

    def run_inside(self, args, env=None, unset=(), timeout=60.0):
        """Runs redlock with `args` as a process of the holder's PROGRAM's tree (a nested
        run inherits REDLOCK_KEY, REDLOCK_TOKEN and REDLOCK_FENCE from it), with the
        variables of `env` set and those in `unset` removed; returns a Result."""
        words = ["env"] + [f"-u{name}" for name in unset]
        words += [f"{k}={v}" for k, v in (env or {}).items()] + [REDLOCK_BIN] + list(args)
        return run_in_holder_script(self.dir, words, timeout, self.proc)

    def release(self, timeout=30.0):
        """Lets PROGRAM exit and returns redlock's status."""
        with open(self.path("go"), "w"):
            pass
        return self.proc.wait(timeout)


class E2ETest(unittest.TestCase):
    """Base class: temp dirs, servers and processes are cleaned up after every test."""

    maxDiff = None
    runs_cgroup = None  # see run_in_a_cgroup_of_its_own

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="redlock-e2e-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(os.path.join(self.home, ".config"))
        self._pids_to_kill = []
        self.addCleanup(self._kill_leftovers)

    def _kill_leftovers(self):
        for pid in self._pids_to_kill:
            kill_quietly(pid)

    def kill_at_cleanup(self, pid):
        """Makes sure a process a PROGRAM started does not outlive the test."""
        self._pids_to_kill.append(pid)

    def mkdtemp(self, prefix="d-"):
        return tempfile.mkdtemp(prefix=prefix, dir=self.tmp)

    def path(self, *names):
        return os.path.join(self.tmp, *names)

    def write_file(self, name, text, mode=0o600):
        path = self.path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def require_server(self, version, what):
        """Skips the test on a server older than Redis `version` (major, minor), which
        lacks `what`."""
        if server_version() < version:
            self.skipTest(f"{what} needs Redis {version[0]}.{version[1]}; this server answers "
                          f"as {server_version()[0]}.{server_version()[1]}")

    def redis_server(self, **options):
        server = RedisServer(**options)
        self.addCleanup(server.stop)
        return server

    def delay_proxy(self, server, delay):
        """A DelayProxy in front of SERVER (a RedisServer); stopped at cleanup."""
        proxy = DelayProxy(server.address, delay)
        self.addCleanup(proxy.stop)
        return proxy

    def fake_redis(self, reply):
        """A FakeRedis answering with reply(args); stopped at cleanup."""
        server = FakeRedis(reply)
        self.addCleanup(server.stop)
        return server

    def env(self, extra=None):
        return isolated_env(self.home, extra)

    def run_redlock(self, args, input=None, env=None, timeout=30.0, cwd=None):
        """Runs redlock to completion; returns a Result (AssertionError on timeout)."""
        full = [REDLOCK_BIN] + list(args)
        start = time.monotonic()
        try:
            cp = subprocess.run(full, input=input, capture_output=True,
                                stdin=None if input is not None else subprocess.DEVNULL,
                                env=env if env is not None else self.env(),
                                cwd=cwd or self.tmp, timeout=timeout * SLACK,
                                preexec_fn=_child_setup(self.runs_cgroup))
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"redlock did not finish in {timeout * SLACK:.1f}s: {full}; "
                                 f"stderr: {e.stderr!r}") from None
        elapsed = time.monotonic() - start
        return Result(cp.returncode, cp.stdout.decode("utf-8", "replace"),
                      cp.stderr.decode("utf-8", "replace"), elapsed, full, cp.stdout)

    def assertCrowdLosesNoUpdate(self, global_args, n, wait, hold="0.05", extra=(),
                                 gathered=None):
        """n concurrent `run -w WAIT` of one read-increment-write job (HOLD seconds long):
        the counter ends at exactly n and no two ever held the lock at once (mkdir detects
        an overlap).

        With `gathered` = (servers, callback): the crowd first gathers behind a holder,
        callback() is called once every waiter is on the wait list of each of those
        servers, then the holder lets go. What follows
        is hand-overs only, however slowly the crowd started (a loaded machine starts 30
        ASan processes over seconds, and their first tries meet the hand-overs)."""
        counter = self.write_file("counter", "0\n")
        inside = self.path("inside")
        overlaps = self.path("overlaps")
        script = ('mkdir "$2" 2>/dev/null || echo overlap >> "$3"; '
                  'n=$(cat "$1"); sleep "$4"; echo $((n + 1)) > "$1"; '
                  'rmdir "$2"')
        gate = None
        if gathered is not None:
            gate = self.holder(["-k", "crowd"], global_args=global_args).wait_ready()
        procs = [self.start_redlock(list(global_args) + [
            "run", "-k", "crowd", "-w", wait, *extra, "--", "sh", "-c", script, "sh", counter,
            inside, overlaps, hold]) for _ in range(n)]
        if gate is not None:
            servers, callback = gathered
            for s in servers:
                wait_until(lambda: s.command("ZCARD", "{lock:crowd}:waiters") == n, 60,
                           message=f"{n} waiters on the wait list of {s.url()}",
                           proc=gate.proc)
            callback()
            self.assertEqual(gate.release(), 0, gate.proc.stderr)
        for p in procs:
            self.assertEqual(p.wait(120.0), 0, p.stderr)
        with open(counter) as f:
            self.assertEqual(f.read(), f"{n}\n")
        self.assertFalse(os.path.exists(overlaps), "two contenders held the lock at once")

    def start_redlock(self, args, env=None, stdin=None, cwd=None, pass_fds=()):
        """Starts redlock in the background; killed at cleanup if still running."""
        proc = RedlockProcess(args, env if env is not None else self.env(), cwd or self.tmp,
                              stdin=stdin, pass_fds=pass_fds, cgroup=self.runs_cgroup)
        self.addCleanup(proc.cleanup)
        return proc

    def run_in_a_cgroup_of_its_own(self, parent):
        """From now on every redlock this test starts runs in a new cgroup below the
        cgroup v2 directory `parent`, where the cgroups of its runs are beside none of
        other tests' (removed at cleanup, once its processes are gone)."""
        path = os.path.join(parent, f"e2e-{os.getpid()}-{len(os.listdir(parent))}")
        os.mkdir(path)
        self.runs_cgroup = path

        def remove():
            self.runs_cgroup = None
            self._kill_leftovers()
            for below in sorted((os.path.join(d, n) for d, names, _ in os.walk(path)
                                 for n in names), key=len, reverse=True) + [path]:
                try:
                    wait_until(lambda: _rmdir_quietly(below), 10,
                               message=f"{below} to be emptied and removed")
                except AssertionError:
                    pass
        self.addCleanup(remove)
        return path

    def holder(self, run_args, exit_code=0, global_args=(), env=None):
        """A background redlock holding a lock (see Holder); not yet waited for."""
        return Holder(self, run_args, exit_code, global_args, env)

    # -- assertions

    def assertMessages(self, stderr, min_lines=1):
        """Every stderr line is a redlock message: 'redlock: lowercase text...'."""
        lines = stderr.splitlines()
        self.assertGreaterEqual(len(lines), min_lines, f"expected a message on stderr")
        for line in lines:
            self.assertRegex(line, MESSAGE_LINE, f"stderr line not in house format: {stderr!r}")

    def assertStatus(self, result, expected):
        self.assertEqual(result.returncode, expected, f"unexpected status: {result!r}")

    def assertKeyGone(self, server, key, db=0, within=5.0):
        """`key` is gone from `server`, or goes within `within` seconds: over several
        servers a release returns once a majority has answered, and its request to the
        rest may still be on its way."""
        try:
            wait_until(lambda: server.command("EXISTS", key, db=db) == 0, within,
                       message=f"{key} to go")
        except AssertionError:
            self.fail(f"{key} still set: {server.command('TYPE', key, db=db)}")


def main():
    unittest.main(verbosity=2)
