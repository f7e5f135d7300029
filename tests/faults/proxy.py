"""A fault-injecting TCP proxy for the fault suite (stdlib only, asyncio, one process).

    python3 proxy.py HOST:PORT [HOST:PORT...]

Listens on one loopback port per target and prints them as one line ("PORT PORT ...").
Then reads commands on stdin, one JSON object a line, and answers "ok" on stdout:

  {"op": "mode", "i": 0, "dir": "c2s"|"s2c", "mode": "pass"}
  {"op": "mode", ..., "mode": "delay", "base": 0.1, "jitter": 0.05}   seconds
  {"op": "mode", ..., "mode": "hold"}     partition: bytes are kept, not delivered
  {"op": "mode", ..., "mode": "drop"}     the next chunk is lost and both sides get RST
  {"op": "reset", "i": 0}                 RST every connection of target i now
  {"op": "quit"}

c2s is client to server, s2c the replies. "hold" then "pass" delivers what was kept, late
(as TCP does after a partition heals); "hold" then "reset" loses it. With s2c "hold" or
"drop" the server has executed the command and the client never hears the reply.
"""

import asyncio
import json
import random
import resource
import socket
import struct
import sys


def abort(writer):
    """Close with RST (SO_LINGER 0), not FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class Conn:
    def __init__(self, target, client_r, client_w, server_r, server_w):
        self.target = target
        self.writers = (client_w, server_w)
        self.closed = False
        self.kick = {"c2s": asyncio.Event(), "s2c": asyncio.Event()}
        self.queues = {"c2s": [], "s2c": []}
        self.last_due = {"c2s": 0.0, "s2c": 0.0}
        self.eof_sent = set()
        self.tasks = [
            asyncio.ensure_future(self.read(client_r, "c2s")),
            asyncio.ensure_future(self.read(server_r, "s2c")),
            asyncio.ensure_future(self.write(server_w, "c2s")),
            asyncio.ensure_future(self.write(client_w, "s2c")),
        ]

    def close(self, graceful=False):
        if self.closed:
            return
        self.closed = True
        for w in self.writers:
            if graceful:
                w.close()
            else:
                abort(w)
        current = asyncio.current_task()
        for t in self.tasks:
            if t is not current:
                t.cancel()
        self.target.conns.discard(self)

    async def read(self, reader, direction):
        loop = asyncio.get_running_loop()
        while not self.closed:
            try:
                data = await reader.read(65536)
            except (OSError, ConnectionError):
                data = b""
            if self.closed:
                return
            mode = self.target.modes[direction]
            if data and mode[0] == "drop":
                self.target.modes[direction] = ("pass",)
                self.close()
                return
            now = loop.time()
            due = now
            if mode[0] == "delay":
                due = now + mode[1] + random.uniform(0, mode[2])
            due = max(due, self.last_due[direction])  # keep the byte order
            self.last_due[direction] = due
            self.queues[direction].append((due, data))
            self.kick[direction].set()
            if not data:
                return

    async def write(self, writer, direction):
        loop = asyncio.get_running_loop()
        q = self.queues[direction]
        kick = self.kick[direction]
        try:
            while not self.closed:
                if not q or self.target.modes[direction][0] == "hold":
                    kick.clear()
                    await kick.wait()
                    continue
                due, data = q[0]
                wait = due - loop.time()
                if wait > 0:
                    kick.clear()
                    try:
                        await asyncio.wait_for(kick.wait(), wait)
                    except asyncio.TimeoutError:
                        pass
                    continue
                q.pop(0)
                if not data:
                    try:
                        writer.write_eof()
                    except OSError:
                        self.close()
                        return
                    # Both ways closed: the connection is over (else its sockets leak and
                    # the proxy runs out of descriptors).
                    self.eof_sent.add(direction)
                    if len(self.eof_sent) == 2:
                        self.close(graceful=True)
                    return
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            self.close()


class Target:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.modes = {"c2s": ("pass",), "s2c": ("pass",)}
        self.conns = set()
        self.server = None

    async def start(self):
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def accept(self, client_r, client_w):
        try:
            server_r, server_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            abort(client_w)
            return
        for w in (client_w, server_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conns.add(Conn(self, client_r, client_w, server_r, server_w))

    def set_mode(self, direction, mode):
        self.modes[direction] = mode
        for c in list(self.conns):
            c.kick[direction].set()

    def reset(self):
        for c in list(self.conns):
            c.close()


async def main():
    # Every client run opens a connection per server: leave room for many at once.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    targets = []
    for spec in sys.argv[1:]:
        host, port = spec.rsplit(":", 1)
        targets.append(Target(host, int(port)))
    ports = [await t.start() for t in targets]
    print(" ".join(map(str, ports)), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            break
        t = targets[cmd["i"]]
        if op == "mode":
            m = cmd["mode"]
            mode = (m, cmd.get("base", 0.0), cmd.get("jitter", 0.0)) if m == "delay" else (m,)
            t.set_mode(cmd["dir"], mode)
        elif op == "reset":
            t.reset()
        print("ok", flush=True)
    for t in targets:
        t.reset()


if __name__ == "__main__":
    asyncio.run(main())
