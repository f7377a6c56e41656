"""Isolation: the tiers a sandbox runs on and everything they share.

``launcher`` prepares a sandbox's host side (cgroups, network, user and mount
namespaces, the overlay root) and ends in a tier: ``namespace`` (bubblewrap,
with the ``seccomp`` filter) or ``gvisor`` (runsc). ``cgroups`` holds a
sandbox to its limits, ``writable`` sizes its writable layer, ``registry``
records each sandbox on disk so any process can reach it, ``gc`` removes what
dead ones left, ``channel`` speaks to the agent inside, and ``native`` builds
that agent (C). ``spec`` is what crosses the seam (``errand.sandbox.backend``).
"""
