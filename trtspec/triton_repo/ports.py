"""The TCP ports a local tritonserver binds: free ones for unset endpoints, and the checks before start.

Every endpoint binds 127.0.0.1 (HOST). A free port is one the OS hands out for port 0 at that moment:
nothing holds it afterwards, so it may equal a port configured for another endpoint (not bound yet)
or one picked for an earlier endpoint; free_ports never returns those.
"""

from __future__ import annotations

import socket

from ..errors import TrtspecError
from .options import shared_port

HOST = "127.0.0.1"
PICK_ATTEMPTS = 100  # OS picks per unset endpoint before giving up (one almost always suffices)


def port_in_use(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def free_ports(ports: dict[str, int | None]) -> dict[str, int]:
    """`ports` with each unset (None or 0) endpoint given a free port that is neither a configured
    port nor one already picked here, so that the server never fails to bind its own ports."""
    taken = {p for p in ports.values() if p}
    out = {}
    for name, port in ports.items():
        if not port:
            port = next((p for p in (free_port() for _ in range(PICK_ATTEMPTS)) if p not in taken), None)
            if port is None:
                raise TrtspecError(f"triton.ports.{name}: no free port found apart from {sorted(taken)}; set one")
            taken.add(port)
        out[name] = port
    return out


def check_ports(ports: dict[str, int]) -> None:
    problem = shared_port(ports)
    if problem:
        raise TrtspecError(f"triton.ports: {problem}")
    for name, port in ports.items():
        if not 0 < port < 65536:
            raise TrtspecError(f"triton.ports.{name}: {port} is not a TCP port")
        if port_in_use(port):
            raise TrtspecError(f"triton.ports.{name}: {HOST}:{port} is already in use (another server running? "
                               f"pick a free port with triton.ports.{name})")


def server_ports() -> tuple[int, int, int]:
    """(http, grpc, metrics): three free ports, none the same (free_ports), for a server started on
    picked ports (tests, benchmarks)."""
    picked = free_ports({"http": None, "grpc": None, "metrics": None})
    return picked["http"], picked["grpc"], picked["metrics"]
