"""Ports of a local tritonserver: the ones trtspec picks for unset endpoints never collide.

The OS hands out a free port for port 0 at that moment and nothing holds it, so it may be a port
configured for another endpoint (not bound yet) or one just picked for an earlier endpoint; a
stand-in for the OS returns exactly those first.
"""

from __future__ import annotations

import pytest

from trtspec.errors import TrtspecError
from trtspec.triton_repo import ports


def os_picks(monkeypatch, *sequence):
    picks = iter(sequence)
    monkeypatch.setattr(ports, "free_port", lambda: next(picks))


def test_a_picked_port_is_never_a_configured_one(monkeypatch):
    os_picks(monkeypatch, 8001, 41000, 8001, 41001)
    assert ports.free_ports({"http": None, "grpc": 8001, "metrics": None}) == {
        "http": 41000, "grpc": 8001, "metrics": 41001}


def test_two_picked_ports_are_never_the_same(monkeypatch):
    os_picks(monkeypatch, 41000, 41000, 41002)
    assert ports.free_ports({"http": None, "grpc": None, "metrics": 9000}) == {
        "http": 41000, "grpc": 41002, "metrics": 9000}


def test_configured_ports_are_kept_and_only_unset_ones_picked(monkeypatch):
    os_picks(monkeypatch)  # no pick at all
    assert ports.free_ports({"http": 9000, "grpc": 9001, "metrics": 9002}) == {
        "http": 9000, "grpc": 9001, "metrics": 9002}


def test_an_os_that_only_offers_taken_ports_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(ports, "free_port", lambda: 8001)
    with pytest.raises(TrtspecError, match=r"^triton\.ports\.http: no free port found apart from \[8001, 8002\]; set one$"):
        ports.free_ports({"http": None, "grpc": 8001, "metrics": 8002})


def test_server_ports_are_three_different_ones(monkeypatch):
    """What tests and benchmarks start servers on: three picks of free_port() in a row may repeat."""
    os_picks(monkeypatch, 41000, 41000, 41001, 41001, 41002)
    assert ports.server_ports() == (41000, 41001, 41002)
