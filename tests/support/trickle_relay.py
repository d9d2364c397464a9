"""A TCP relay in front of a real cluster that can slow its answers to a trickle.

`TrickleRelay(upstream_url)` listens on a free loopback port and passes every connection's bytes
to the cluster and back unchanged; while `trickling` is set, the cluster's answers come back one
byte every `interval` seconds (a slow network, an overloaded node): each byte arrives well within
any per-read time-out, the whole answer never within a reasonable one; cleared, the rest of an
answer comes at once. The engine answering is the real one; only the pace of its bytes changes.
The deadline tests of the proxy, the service and the follower all use it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from urllib.parse import urlsplit


class TrickleRelay:
    def __init__(self, upstream_url: str, interval: float = 0.25) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.interval = interval
        self.trickling = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._closed = threading.Event()
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                cluster = socket.create_connection(self.upstream, timeout=30)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, cluster, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(cluster, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        source.settimeout(None)
        try:
            while not self._closed.is_set():
                data = source.recv(65536)
                if not data:
                    break
                for position in range(len(data)):
                    # Checked at every byte: set or cleared, the new pace starts at once.
                    if not (answers and self.trickling.is_set()):
                        sink.sendall(data[position:])
                        break
                    if self._closed.is_set():
                        return
                    sink.sendall(data[position : position + 1])
                    time.sleep(self.interval)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def __enter__(self) -> TrickleRelay:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
