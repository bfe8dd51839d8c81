"""A TCP relay from a local port to the database server, for tests of a link that stops answering
while its far side still acknowledges (nothing for TCP keepalives or ``tcp_user_timeout`` to see)."""

from __future__ import annotations

import socket
import threading
import time


class Relay:
    """Pass TCP connections from a local port to ``server``. :meth:`silence` stops passing bytes on
    every connection (both ways, sockets left open) until :meth:`resume`; :meth:`stall` stops them
    for good on the connections made so far, while later ones pass (the server answers again)."""

    def __init__(self, server: tuple[str, int]) -> None:
        self.server = server
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = threading.Event()
        self.open.set()
        self.closed = False
        self.clients: list[socket.socket] = []
        self.stalled: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.server)
            with self.lock:
                self.clients.append(client)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pass, args=(a, b, client), daemon=True).start()

    def _pass(self, source: socket.socket, sink: socket.socket, client: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.open.wait()
                while client in self.stalled and not self.closed:
                    time.sleep(0.1)  # read, never passed on
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def silence(self) -> None:
        self.open.clear()

    def resume(self) -> None:
        self.open.set()

    def stall(self) -> int:
        """Pass nothing more on the connections made so far; return how many there are."""
        with self.lock:
            self.stalled.update(self.clients)
            return len(self.clients)

    def close(self) -> None:
        self.closed = True
        self.open.set()
        self.listener.close()
