"""A round-robin TCP load balancer on loopback: each new connection goes to the next upstream in turn.

Stands in for what sits in front of engine replicas in production (compose's DNS, a cloud load balancer),
so that tests can put several real engines behind one bridge. Bytes are piped unchanged both ways.
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Sequence


class RoundRobin:
    def __init__(self, upstreams: Sequence[tuple[str, int]]) -> None:
        self._upstreams = itertools.cycle(list(upstreams))
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="round-robin").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                upstream = next(self._upstreams)
                self.connections += 1
            try:
                backend = socket.create_connection(upstream, timeout=10)
            except OSError:
                client.close()
                continue
            backend.settimeout(None)
            for source, target in ((client, backend), (backend, client)):
                threading.Thread(target=_pipe, args=(source, target), daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._server.close()


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
