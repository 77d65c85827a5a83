"""Packet-level discrete-event simulator driving the PANAMA core (network: docs/simulator-network.md)."""
