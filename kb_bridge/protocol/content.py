"""Resources, prompts, completions and logging/setLevel over MCP: adapters from the plain modules of
content/ (resources, prompts, completions) to the protocol, with errors translated once."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from kb_bridge.content import completions, prompts, resources
from kb_bridge.protocol.caller import request_principal
from kb_bridge.protocol.paging import refuse_cursor
from kb_bridge.errors import Forbidden, InvalidArgument, KbError, NotFound
from kb_bridge.runtime import Bridge
from kb_bridge.auth.principal import Principal
from kb_bridge.credentials.scopes import READ

logger = logging.getLogger(__name__)

Ctx = ServerRequestContext[Any, Any]
T = TypeVar("T")


# The MCP specification's code for a resource that does not exist (resources/read).
RESOURCE_NOT_FOUND = -32002


async def _translated(work: Callable[[], Awaitable[T]], uri: str | None = None) -> T:
    """Errors → a JSON-RPC error, once: a malformed request is INVALID_PARAMS, an unknown resource
    RESOURCE_NOT_FOUND (either naming the `uri` asked for in its data, as SEP-2164 asks), a caller without
    the right INVALID_REQUEST (its data's code FORBIDDEN: the caller's fault, not the server's), any other
    KbError INTERNAL_ERROR with our message; a bug is logged and answered INTERNAL_ERROR without detail (never an
    exception's own text)."""
    try:
        return await work()
    except InvalidArgument as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=exc.message, data=_with_uri(exc, uri)) from None
    except NotFound as exc:
        raise MCPError(code=RESOURCE_NOT_FOUND, message=exc.message, data=_with_uri(exc, uri)) from None
    except Forbidden as exc:
        raise MCPError(code=types.INVALID_REQUEST, message=exc.message, data=exc.to_dict()) from None
    except KbError as exc:
        raise MCPError(code=types.INTERNAL_ERROR, message=exc.message, data=exc.to_dict()) from None
    except MCPError:
        raise
    except Exception:
        logger.exception("a resources/prompts/completions request failed unexpectedly")
        raise MCPError(code=types.INTERNAL_ERROR, message="an internal error occurred; it has been logged") from None


def _with_uri(exc: KbError, uri: str | None) -> dict[str, object]:
    return exc.to_dict() if uri is None else {**exc.to_dict(), "uri": uri}


def readable_by(ctx: Ctx) -> Principal:
    """The request's principal, who must hold kb:read to see any content (the HTTP door already
    answered 403 to a token without it; this is the same rule for any other way in)."""
    principal = request_principal(ctx)
    if not principal.can(READ):
        raise Forbidden(f"this token lacks the {READ} scope")
    return principal


class ContentHandlers:
    def __init__(self, bridge: Bridge) -> None:
        self._bridge = bridge
        self._templates = types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=t.uri_template, name=t.name, title=t.title, description=t.description,
                    mime_type=resources.MARKDOWN,
                )
                for t in resources.TEMPLATES
            ]
        )
        self._prompts = types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=p.name, title=p.title, description=p.description,
                    arguments=[types.PromptArgument(name=a.name, description=a.description, required=a.required) for a in p.arguments],
                )
                for p in prompts.PROMPTS
            ]
        )

    async def list_resources(self, ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        async def work() -> types.ListResourcesResult:
            principal = readable_by(ctx)
            cursor = params.cursor if params and params.cursor else None
            items, following = await self._bridge.run(resources.list_recent, self._bridge.engine, principal, cursor)
            return types.ListResourcesResult(
                resources=[
                    types.Resource(uri=i.uri, name=i.name, title=i.title, description=i.description, mime_type=resources.MARKDOWN)
                    for i in items
                ],
                next_cursor=following,
            )

        return await _translated(work)

    async def list_resource_templates(self, ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
        refuse_cursor(params)
        return self._templates

    async def read_resource(self, ctx: Ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        async def work() -> types.ReadResourceResult:
            text = await self._bridge.run(resources.read, self._bridge.engine, readable_by(ctx), params.uri)
            return types.ReadResourceResult(
                contents=[types.TextResourceContents(uri=params.uri, mime_type=resources.MARKDOWN, text=text)]
            )

        return await _translated(work, uri=params.uri)

    async def list_prompts(self, ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        refuse_cursor(params)
        return self._prompts

    async def get_prompt(self, ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        spec = prompts.find(params.name)
        if spec is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name[:100]}")

        async def work() -> types.GetPromptResult:
            text = prompts.render(spec, params.arguments or {})
            return types.GetPromptResult(
                description=spec.description,
                messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
            )

        return await _translated(work)

    async def complete(self, ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref
        reference = ref.name if isinstance(ref, types.PromptReference) else ref.uri

        async def work() -> types.CompleteResult:
            values, total = await self._bridge.run(
                completions.complete, self._bridge.engine, readable_by(ctx), reference, params.argument.name,
                params.argument.value,
            )
            return types.CompleteResult(
                completion=types.Completion(values=values, total=total, has_more=total > len(values))
            )

        try:
            return await _translated(work)
        except MCPError:
            # Completion is a convenience: when the engine cannot answer, offer nothing rather than fail.
            return types.CompleteResult(completion=types.Completion(values=[], total=0, has_more=False))

    async def set_logging_level(self, ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        # Accepted for clients that send it; the bridge sends no log notifications, and its own
        # log level is the operator's (KB_LOG_LEVEL), not a client's to change.
        logger.debug("client asked for log level %s", params.level)
        return types.EmptyResult()
