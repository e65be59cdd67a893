"""Helpers for the pytest-lsp tests: the server command, initialising as a given editor, documents."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Awaitable, TypeVar

from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from specd.lsp.positions import index_to_column

T = TypeVar("T")
TINY_SERVER = [sys.executable, str(Path(__file__).resolve().parent / "lsp_tiny.py")]
EDITORS = ["neovim", "visual-studio-code"]
ROOT_URI = "file:///work/proj"
DOC_URI = f"{ROOT_URI}/src/fib.py"
DOC_TEXT = "# 😀 café\ndef fib(n):\n    \n"


async def initialize(client: LanguageClient, editor: str, **options: object) -> types.InitializeResult:
    return await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities(editor), root_uri=ROOT_URI,
        initialization_options=options or None))


def encoding_of(result: types.InitializeResult) -> str:
    enc = result.capabilities.position_encoding
    return str(getattr(enc, "value", enc) or "utf-16")


def position(text: str, line: int, index: int, encoding: str) -> types.Position:
    """The LSP position of code point ``index`` on ``line`` in ``encoding``."""
    return types.Position(line, index_to_column(text.split("\n")[line], index, encoding))


def open_doc(client: LanguageClient, uri: str = DOC_URI, text: str = DOC_TEXT, version: int = 1) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))


def insert(client: LanguageClient, uri: str, version: int, at: types.Position, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        [types.TextDocumentContentChangePartial(range=types.Range(at, at), text=text)]))


def configure(client: LanguageClient, **options: object) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"specd": options}))


def inline_params(uri: str, at: types.Position) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
        text_document=types.TextDocumentIdentifier(uri=uri), position=at)


def completion_params(uri: str, at: types.Position) -> types.CompletionParams:
    return types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=at)


async def sent(request: "Awaitable[T]") -> "asyncio.Task[T]":
    """Start a request now (pytest-lsp's requests are coroutines: they go out when first run)."""
    task = asyncio.ensure_future(request)
    await asyncio.sleep(0)
    return task
