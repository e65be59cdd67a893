"""The daemon: models resident behind a Unix socket speaking JSON-RPC 2.0 (one object per line)."""
