"""The LSP frontend (``specd lsp``): editor completions through pygls, forwarded to the daemon or
to an engine embedded in the process."""
