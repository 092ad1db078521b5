"""The lists answered in one page: tools/list, prompts/list and resources/templates/list.

They never return a `nextCursor`, so any cursor sent with them is not one this server returned. The MCP
spec (server/utilities/pagination) says an invalid cursor SHOULD get -32602; resources/list, which pages,
answers one so (tools/reach.py, through protocol/content.py), and these three answered the first page
again instead. Now all four answer alike: -32602 naming `cursor`, the same message and data.
"""

from __future__ import annotations

import mcp_types as types
from mcp.shared.exceptions import MCPError

from kb_bridge.errors import InvalidArgument


def refuse_cursor(params: types.PaginatedRequestParams | None) -> None:
    """Raise -32602 when a cursor is sent (an empty one is no cursor, as resources/list reads it)."""
    if params is not None and params.cursor:
        error = InvalidArgument("cursor", "is not a cursor this server returned (this list has one page)")
        raise MCPError(code=types.INVALID_PARAMS, message=error.message, data=error.to_dict())
