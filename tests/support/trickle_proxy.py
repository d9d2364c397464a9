"""A TCP proxy in front of a real cluster that, while `slow` is set, passes the cluster's answers
on one byte a second: the shape of an upstream that never times out a client whose time-out
applies to each read. The cluster itself is real; only the pace of its answers is changed."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit


class TrickleProxy:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.slow = threading.Event()
        self.closed = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def serve(self) -> None:
        self.server.settimeout(0.2)
        while not self.closed.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            for source, sink, trickle in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pump, args=(source, sink, trickle), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, trickle: bool) -> None:
        with contextlib.suppress(OSError):
            while not self.closed.is_set():
                data = source.recv(65536)
                if not data:
                    break
                for start in range(len(data)):
                    if not (trickle and self.slow.is_set()):
                        sink.sendall(data[start:])
                        break
                    sink.sendall(data[start : start + 1])
                    time.sleep(1.0)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def trickling(upstream: str) -> Iterator[TrickleProxy]:
    proxy = TrickleProxy(upstream)
    thread = threading.Thread(target=proxy.serve, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.closed.set()
        proxy.server.close()
        thread.join(5)
