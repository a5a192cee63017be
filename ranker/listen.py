"""The HTTP listening socket, which several processes may share (``MNEMO_REUSE_PORT``)."""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` for uvicorn to listen on (``Server.serve(sockets=
    [...])``), as asyncio binds one for uvicorn (IPv6 when ``host`` has a colon, ``SO_REUSEADDR``,
    connections with ``TCP_NODELAY``).

    With ``reuse_port`` the socket also sets ``SO_REUSEPORT``: every process that binds the same
    address with it set gets a socket of its own and the kernel spreads new connections among
    them (Linux; a connection stays with the process that accepted it). A process on that
    address without it, or of another user, keeps the address to itself: binding then fails.
    Raises OSError when the address cannot be bound (in use, not local) and ValueError when
    ``reuse_port`` is asked where the platform has no ``SO_REUSEPORT``.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on connections of such a socket, and
    # without it a keep-alive answer's body (sent after its head) waits ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            option = getattr(socket, "SO_REUSEPORT", None)
            if option is None:
                msg = "reuse_port: this platform has no SO_REUSEPORT"
                raise ValueError(msg)
            sock.setsockopt(socket.SOL_SOCKET, option, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
