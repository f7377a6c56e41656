"""Egress: the only way out of a sandbox's network namespace.

``proxy`` is the host-side filtering proxy (CONNECT tunnels and plain HTTP),
deciding each connection by the sandbox's ``Network`` policy; ``http`` and
``plainhttp`` frame and relay plain-HTTP requests, ``tls`` peeks at a
tunnel's ClientHello for its server name, and ``supervisor`` serves a
detached sandbox's proxy from a process that lives as long as it does.
"""
