"""An MCP client of wikiq's Streamable HTTP endpoint: lists the tools, then calls list_wikis.

    python examples/mcp_client.py [URL]

URL defaults to http://127.0.0.1:8080/mcp; WIKIQ_TOKEN, when set, is sent as the bearer token.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp"
TOKEN = os.environ.get("WIKIQ_TOKEN")


async def main() -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=90) as http,
        Client(streamable_http_client(URL, http_client=http)) as client,
    ):
        tools = (await client.list_tools()).tools
        print("tools:", ", ".join(tool.name for tool in tools))
        answer = await client.call_tool("list_wikis", {})
        print("list_wikis:", json.dumps(answer.structured_content, indent=2))


asyncio.run(main())
