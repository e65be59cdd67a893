"""The one place a completion's prompt-shaping parameters are built from the document: the
request a suggestion sends, the ``warm`` sent ahead of it and the editor bench's socket requests
all come from :func:`completion_request`, so a warm computes exactly the prompt the next request
uses.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath

from specd.requests import CompletionRequest
from specd.lsp.context import OtherFile, RecentEdits, display_path, repo_context
from specd.lsp.documents import DocumentState, Documents
from specd.lsp.postprocess import is_mid_line
from specd.lsp.settings import LspSettings
from specd.lsp.window import Window


def completion_request(window: Window, context: str, settings: LspSettings) -> CompletionRequest:
    """The request for a suggestion at ``window``: greedy, one line when the cursor is mid-line."""
    mid = settings.rules.single_line_mid_line and is_mid_line(window.line_suffix)
    return CompletionRequest(prefix=window.prefix, suffix=window.suffix, max_tokens=settings.max_tokens,
                             temperature=0.0, stop=("\n",) if mid else (), context=context)


def context_for(doc: DocumentState, documents: Documents, recent: RecentEdits, settings: LspSettings) -> str:
    """Repository context: the recently edited other open documents, around their last edits."""
    if not settings.repo_context:
        return ""
    root = documents.root()
    others: list[OtherFile] = []
    for uri, line in recent.recent(doc.uri, settings.context.files):
        other = documents.get(uri)
        if other is not None:
            others.append(OtherFile(display_path(other.path, root, other.language), other.text, line))
    repo = PurePosixPath(root).name if root else "workspace"
    return repo_context(repo, display_path(doc.path, root, doc.language), others, settings.context)


def session_for(tag: str, uri: str) -> str:
    """The daemon session of a document: one per document and server process."""
    return f"{tag}-{hashlib.sha1(uri.encode('utf-8', 'replace')).hexdigest()[:16]}"
