"""Images: the content-addressed layers a sandbox's root is stacked from, and how they are made.

``layers`` stores layers and resolved images on disk; ``builder`` turns an
``Image``'s steps into layers (cached per step); ``base_image`` synthesizes
the root of ``Image.base()`` over the host's programs, ``debian`` builds a
Debian root with mmdebstrap, and ``pipconfig`` reads the host's pip settings
for steps that install packages.
"""
