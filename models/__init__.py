"""Model runtimes, loading and conversion (installed as ``specd.models``).

A model here knows nothing of speculation: it scores new tokens against its own KV cache and can
move that cache back. The engine (``specd.engine``) builds speculative decoding on top.
"""

from specd.models.config import ModelConfig
from specd.models.decoder import Decoder
from specd.models.kv_cache import KVCache

__all__ = ["Decoder", "KVCache", "ModelConfig"]
