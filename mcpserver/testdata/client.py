"""An agent on the official MCP Python SDK: connects (Streamable HTTP with HTTP Basic,
or a stdio server process), lists the tools and makes the calls it is given.

Usage: client.py CALLS_JSON   with MCP_URL, MCP_USER, MCP_PASSWORD for HTTP, or
MCP_COMMAND (a JSON list: the program and its arguments) for stdio.
CALLS_JSON is a list of [tool, arguments]. Prints one JSON line: the tool names and,
per call, whether it failed and its text.
"""
import base64
import json
import os
import sys

import anyio
from mcp import ClientSession

try:  # SDK 2.x
    from mcp.client.streamable_http import streamable_http_client as _http_v2
    from mcp.shared._httpx_utils import create_mcp_http_client
except ImportError:  # SDK 1.x
    _http_v2 = None
    from mcp.client.streamable_http import streamablehttp_client as _http_v1
from mcp.client.stdio import StdioServerParameters, stdio_client


def transport():
    if os.environ.get("MCP_COMMAND"):
        cmd = json.loads(os.environ["MCP_COMMAND"])
        return stdio_client(StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ)))
    token = base64.b64encode(f'{os.environ["MCP_USER"]}:{os.environ["MCP_PASSWORD"]}'.encode()).decode()
    headers = {"Authorization": "Basic " + token}
    if _http_v2 is not None:
        return _http_v2(os.environ["MCP_URL"], http_client=create_mcp_http_client(headers=headers))
    return _http_v1(os.environ["MCP_URL"], headers=headers)


async def main():
    calls = json.loads(sys.argv[1])
    out = {"sdk": "python", "tools": [], "calls": []}
    async with transport() as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            out["tools"] = sorted(t.name for t in listed.tools)
            for tool, args in calls:
                res = await session.call_tool(tool, args)
                is_error = getattr(res, "is_error", None)
                if is_error is None:
                    is_error = getattr(res, "isError", False)
                out["calls"].append({"tool": tool, "is_error": bool(is_error), "text": res.content[0].text})
    print(json.dumps(out))


anyio.run(main)
