"""Model runtimes, loading and conversion (installed as ``specd.models``).

A model here knows nothing of speculation: it scores new tokens against its own KV cache and can
move that cache back. The engine (``specd.engine``) builds speculative decoding on top.

Importing the package loads nothing heavy: the light modules (``registry``, ``modes``,
``errors``) serve paths that must not import torch (``specd complete --socket``, ``specd lsp``).
"""
