"""pygls' protocol, with one repair: a request whose params cannot be read gets an
``InvalidParams`` error response (pygls only logs it, and the client would wait forever)."""

from __future__ import annotations

from typing import Any

from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol


class SpecdProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            rid = data.get("id") if isinstance(data, dict) else None
            if isinstance(data, dict) and "method" in data and isinstance(rid, (int, str)) and not isinstance(rid, bool):
                exc.message = f"invalid params for {str(data.get('method'))[:100]}"
                self._send_response(rid, None, exc.to_response_error())
            raise
