"""The HTTP listening socket (``ranker.listen``): real sockets on the loopback interface."""

from __future__ import annotations

import asyncio
import socket

import pytest

from ranker.listen import listening_socket


def test_two_processes_worth_of_sockets_share_a_port_only_when_both_ask() -> None:
    first = listening_socket("127.0.0.1", 0, reuse_port=True)
    first.listen()  # Linux lets SO_REUSEADDR sockets share a port until one listens
    port = first.getsockname()[1]
    try:
        second = listening_socket("127.0.0.1", port, reuse_port=True)
        second.close()
        with pytest.raises(
            OSError, match="in use"
        ):  # the port is held by a socket that shares: this one won't
            listening_socket("127.0.0.1", port, reuse_port=False)
    finally:
        first.close()


def test_a_port_held_without_sharing_refuses_a_sharer_naming_the_address() -> None:
    first = listening_socket("127.0.0.1", 0)
    first.listen()
    port = first.getsockname()[1]
    try:
        with pytest.raises(OSError, match=f"cannot bind 127.0.0.1:{port}: .*in use"):
            listening_socket("127.0.0.1", port, reuse_port=True)
    finally:
        first.close()


def test_an_ipv6_address_binds_ipv6_only_and_a_name_resolves() -> None:
    v6 = listening_socket("::1", 0)
    try:
        assert v6.family == socket.AF_INET6
        assert v6.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
    finally:
        v6.close()
    named = listening_socket("localhost", 0)
    try:
        assert named.getsockname()[0] in ("127.0.0.1", "::1")
    finally:
        named.close()


@pytest.mark.parametrize("reuse_port", [False, True])
def test_connections_of_a_served_socket_send_without_delay(reuse_port: bool) -> None:
    """asyncio sets TCP_NODELAY only on connections of an IPPROTO_TCP socket: without it a
    keep-alive answer's body, written after its head, waited ~40 ms for a delayed ACK.
    """

    async def served_nodelay() -> int:
        sock = listening_socket("127.0.0.1", 0, reuse_port=reuse_port)
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            raw: socket.socket = writer.get_extra_info("socket")
            accepted.set_result(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            found = await asyncio.wait_for(accepted, 5)
            writer.close()
            return found
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(served_nodelay()) != 0
