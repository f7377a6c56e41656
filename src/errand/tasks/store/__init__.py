"""The task store: its tables (``schema``), the store itself (``tasks``), the reading half
every face shares (``reading``), word of changes pushed by the database (``changes``) and
an operator's figures (``census``), and the fence of a round's start (``claims``)."""
