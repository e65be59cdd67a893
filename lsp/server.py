"""The pygls language server: capabilities, and thin async handlers that delegate to
:class:`~specd.lsp.service.CompletionService`. Errors go to ``window/logMessage``, never to
``window/showMessage`` popups."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
import time
from threading import Event
from typing import Any, BinaryIO
from urllib.parse import unquote

from lsprotocol import types
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from specd.lsp.backend import Backend, BackendUnavailable
from specd.lsp.documents import DocumentState
from specd.lsp.framing import MAX_MESSAGE_BYTES, FrameReader, serve_frames
from specd.lsp.positions import ENCODINGS, EOL, UTF16, index_to_column
from specd.lsp.protocol import SpecdProtocol
from specd.lsp.service import CompletionService, Suggestion
from specd.lsp.settings import LspSettings
from specd.lsp.status import METHOD as STATUS_METHOD, ReportingBackend, StatusReporter

TRIGGER_CHARACTERS = [".", "(", "[", "{", ",", ":", "=", " ", "\n", ">", "/", "\"", "'"]
log = logging.getLogger("specd.lsp")


class WorkspaceDocuments:
    """:class:`~specd.lsp.documents.Documents` over pygls' workspace."""

    def __init__(self, server: LanguageServer) -> None:
        self.server = server

    def get(self, uri: str) -> DocumentState | None:
        doc = self.server.workspace.text_documents.get(unquote(uri))
        if doc is None:
            return None
        return DocumentState(uri, doc.version, doc.source)

    def encoding(self) -> str:
        value = getattr(self.server.workspace.position_encoding, "value", self.server.workspace.position_encoding)
        return value if value in ENCODINGS else UTF16


class SpecdLanguageServer(LanguageServer):
    def __init__(self, backend: Backend, settings: LspSettings, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        super().__init__("specd", "0.1.0", protocol_cls=SpecdProtocol)
        self.max_message_bytes = max_message_bytes
        self.status = StatusReporter(lambda params: self.protocol.notify(STATUS_METHOD, params))
        self.service = CompletionService(ReportingBackend(backend, self.status), WorkspaceDocuments(self), settings,
                                         self.log_warning, self.log_debug)
        self._background: set[asyncio.Task[Any]] = set()

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serves over stdio as pygls does, but reads frames with :class:`~specd.lsp.framing.FrameReader`:
        malformed frames and messages over ``max_message_bytes`` are skipped and logged, and the
        server goes on from the next ``Content-Length`` header."""
        self._stop_event = Event()
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        reader = FrameReader(stdin or sys.stdin.buffer, self.max_message_bytes, log)
        try:
            asyncio.run(serve_frames(self._stop_event, reader, self.protocol, self.thread_pool,
                                     self.report_server_error, log))
        except BrokenPipeError:
            log.error("the connection to the client is lost; shutting down")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def log_message(self, kind: types.MessageType, message: str) -> None:
        log.log({types.MessageType.Error: logging.ERROR, types.MessageType.Warning: logging.WARNING}.get(
            kind, logging.INFO), message)
        try:
            self.window_log_message(types.LogMessageParams(type=kind, message=f"specd: {message}"))
        except Exception:  # no client connected yet, or it is gone
            pass

    def log_warning(self, message: str) -> None:
        self.log_message(types.MessageType.Warning, message)

    def log_info(self, message: str) -> None:
        self.log_message(types.MessageType.Info, message)

    def log_debug(self, message: str) -> None:
        log.debug(message)

    def report_server_error(self, error: Exception, source: Any) -> None:
        self.log_message(types.MessageType.Error, f"{getattr(source, '__name__', source)}: {error}")

    def in_background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def warm_up(self) -> None:
        backend = self.service.backend
        try:
            await backend.start()
            self.log_message(types.MessageType.Info, f"ready: {backend.describe()}")
        except BackendUnavailable as e:
            self.log_message(types.MessageType.Warning, f"not ready: {e}")


def build_server(backend: Backend, settings: LspSettings = LspSettings(),
                 max_message_bytes: int = MAX_MESSAGE_BYTES) -> SpecdLanguageServer:
    server = SpecdLanguageServer(backend, settings, max_message_bytes)

    @server.feature(types.INITIALIZE)
    def initialize(ls: SpecdLanguageServer, params: types.InitializeParams) -> None:
        ls.service.settings = apply_options(ls.service.settings, params.initialization_options, ls.log_warning)
        options = params.initialization_options
        ls.status.enabled = isinstance(options, dict) and options.get("statusNotifications") is True

    @server.feature(types.INITIALIZED)
    def initialized(ls: SpecdLanguageServer, params: types.InitializedParams) -> None:
        ls.in_background(ls.warm_up())

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: SpecdLanguageServer, params: types.DidChangeConfigurationParams) -> None:
        options = params.settings.get("specd", params.settings) if isinstance(params.settings, dict) else None
        ls.service.settings = apply_options(ls.service.settings, options, ls.log_warning)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: SpecdLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.service.opened(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: SpecdLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        last = params.content_changes[-1] if params.content_changes else None
        if isinstance(last, types.TextDocumentContentChangePartial):
            start = last.range.start
            ls.service.changed(params.text_document.uri,
                               end_of_insert(start.line, start.character, last.text, ls.service.documents.encoding()))
        else:
            ls.service.changed(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: SpecdLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.service.closed(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: SpecdLanguageServer, params: types.InlineCompletionParams) -> types.InlineCompletionList:
        started = time.monotonic()
        s = await ls.service.suggest(params.text_document.uri, params.position.line, params.position.character)
        if s:
            ls.status.suggested((time.monotonic() - started) * 1e3)
        return types.InlineCompletionList(items=[inline_item(s)] if s else [])

    @server.feature(types.TEXT_DOCUMENT_COMPLETION,
                    types.CompletionOptions(trigger_characters=TRIGGER_CHARACTERS, resolve_provider=False))
    async def completion(ls: SpecdLanguageServer, params: types.CompletionParams) -> types.CompletionList:
        started = time.monotonic()
        s = await ls.service.suggest(params.text_document.uri, params.position.line, params.position.character)
        if s:
            ls.status.suggested((time.monotonic() - started) * 1e3)
        return types.CompletionList(is_incomplete=True, items=[completion_item(s)] if s else [])

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: SpecdLanguageServer, params: None) -> None:
        await ls.service.close()

    return server


def end_of_insert(line: int, character: int, text: str, encoding: str) -> tuple[int, int]:
    """Where the cursor is after ``text`` was inserted at ``(line, character)``."""
    breaks = [m.end() for m in EOL.finditer(text)]
    if not breaks:
        return line, character + index_to_column(text, len(text), encoding)
    tail = text[breaks[-1]:]
    return line + len(breaks), index_to_column(tail, len(tail), encoding)


def apply_options(settings: LspSettings, options: Any, warn: Any) -> LspSettings:
    """``initializationOptions`` or ``workspace/didChangeConfiguration`` settings (optionally under
    ``"specd"``): ``{"maxTokens": int, "lineBudgetMs": number | null, "debounce": bool, "prewarm": bool,
    "prewarmAfterEnter": bool, "requestAhead": bool}``; bad values are logged and ignored."""
    if not isinstance(options, dict):
        return settings
    max_tokens = options.get("maxTokens")
    if max_tokens is not None:
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and 1 <= max_tokens <= 4096:
            settings = dataclasses.replace(settings, max_tokens=max_tokens)
        else:
            warn(f"initializationOptions.maxTokens must be an integer in 1..4096, got {max_tokens!r}")
    if "lineBudgetMs" in options:
        budget = options["lineBudgetMs"]
        if budget is None or (isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget >= 0):
            settings = dataclasses.replace(settings, line_budget_ms=budget)
        else:
            warn(f"initializationOptions.lineBudgetMs must be a number >= 0 or null, got {budget!r}")
    for name, apply in SWITCHES.items():
        value = options.get(name)
        if value is None:
            continue
        if isinstance(value, bool):
            settings = apply(settings, value)
        else:
            warn(f"initializationOptions.{name} must be a boolean, got {value!r}")
    return settings


# boolean options: name -> how it changes the settings
SWITCHES = {
    "debounce": lambda s, v: dataclasses.replace(s, debounce=dataclasses.replace(s.debounce, enabled=v)),
    "prewarm": lambda s, v: dataclasses.replace(s, prewarm=dataclasses.replace(s.prewarm, enabled=v)),
    "prewarmAfterEnter": lambda s, v: dataclasses.replace(s, prewarm=dataclasses.replace(s.prewarm, after_enter=v)),
    "requestAhead": lambda s, v: dataclasses.replace(s, request_ahead=v),
}


def inline_item(s: Suggestion) -> types.InlineCompletionItem:
    at = types.Position(s.line, s.column)
    return types.InlineCompletionItem(insert_text=s.text, range=types.Range(at, at))


def completion_item(s: Suggestion) -> types.CompletionItem:
    text = s.word + s.text
    first = text.split("\n", 1)[0]
    label = (first[:77] + "…") if len(first) > 80 else first
    if "\n" in text:
        label += " …"
    edit = types.TextEdit(range=types.Range(types.Position(s.line, s.word_column), types.Position(s.line, s.column)),
                          new_text=text)
    return types.CompletionItem(
        label=label or text.strip()[:80], kind=types.CompletionItemKind.Text, detail="specd",
        documentation=text,
        filter_text=text, sort_text="0", insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=edit, preselect=True)
