"""The HTTP listening socket, which several processes may share (``MNEMO_REUSE_PORT``)."""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to the first address ``host`` resolves to, port ``port``, for uvicorn to
    listen on (``Server.serve(sockets=[...])``). It is made as asyncio makes one for uvicorn:
    resolved as a passive TCP address, ``SO_REUSEADDR``, ``IPV6_V6ONLY`` for an IPv6 address, and
    the TCP protocol named, so that its connections get ``TCP_NODELAY`` (without it a keep-alive
    answer's body, sent after its head, waits ~40 ms for the client's delayed ACK).

    With ``reuse_port`` the socket also sets ``SO_REUSEPORT``: every process of this user that
    binds the same address with it set gets a socket of its own and the kernel spreads new
    connections among those listening (Linux; a connection stays with the process that accepted
    it). A socket on that address without it keeps the address to itself once it listens, and a
    second stack on the same port with it set shares the traffic silently.

    Raises OSError naming the address when it cannot be bound (in use, not local; note that
    Linux lets two such sockets bind until one listens: uvicorn's ``listen`` fails then), and
    ValueError when ``reuse_port`` is asked where the platform has no ``SO_REUSEPORT``.
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP,
        flags=socket.AI_PASSIVE,
    )[0]  # fmt: skip
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if reuse_port:
            option = getattr(socket, "SO_REUSEPORT", None)
            if option is None:
                msg = "reuse_port: this platform has no SO_REUSEPORT"
                raise ValueError(msg)
            sock.setsockopt(socket.SOL_SOCKET, option, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot bind {host}:{port}: {exc.strerror}") from exc
    except BaseException:
        sock.close()
        raise
    return sock
