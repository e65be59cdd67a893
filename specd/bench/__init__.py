"""``specd bench``: the local latency benchmark.

Runs fill-in-the-middle tasks cut from real code (``data/tasks.jsonl``, shipped with the package) through
specd's modes and optional anchors (transformers assisted generation, llama.cpp), interleaved
so drift cancels, and writes every raw measurement (JSON), a Markdown report and PNG plots.
"""
