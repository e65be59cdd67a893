"""Remote backends: the daemon serving from an existing inference server instead of local models.

``specd serve --backend llama-server:http://HOST:PORT`` (llama.cpp's ``/infill``) or
``--backend openai:http://HOST:PORT/v1`` (``/v1/completions``: vLLM, llama-cpp-python's server,
llama-server, others). Everything above the daemon's Backend seam (the socket protocol, sessions,
cancellation, stats, the LSP) is shared with the local engine; below it, a driver turns a
:class:`~specd.requests.CompletionRequest` into one streamed HTTP request, and the engine's own
post-processing (stop strings, the suffix guard, the end-of-code rule) shapes the text.

Torch-free: a daemon in front of a GPU server starts in well under a second.
"""
