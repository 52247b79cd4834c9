"""`stepscope mcp` driven by the MCP Python SDK's own stdio client: initialize, list the tools, call each on real
stores, and a write query that must be refused. Prints one line per check for the test to read."""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

store, other = sys.argv[1], sys.argv[2]
packed = sys.argv[3] if len(sys.argv) > 3 else None  # the store re-written packed (schema 5)
cli = os.environ["STEPSCOPE_CLI"]


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


def is_error(result):
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


def payload(result):
    structured = getattr(result, "structured_content", getattr(result, "structuredContent", None))
    if structured is not None:
        return structured.get("result", structured) if isinstance(structured, dict) else structured
    return json.loads(text(result))


async def main():
    params = StdioServerParameters(command=cli, args=["mcp"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            info = getattr(init, "server_info", getattr(init, "serverInfo", None))
            print("initialize", info.name)
            tools = await session.list_tools()
            print("tools", " ".join(sorted(t.name for t in tools.tools)))

            async def call(name, **args):
                r = await session.call_tool(name, args)
                return r

            r = await call("open_trace", path=store)
            o = payload(r)
            print("open_trace", is_error(r), o["summary"]["steps"], o["summary"]["step_source"],
                  json.dumps([f["rule"] for f in o["findings"]]))
            r = await call("list_findings", path=store)
            f = payload(r)["findings"]
            print("list_findings", is_error(r), len(f), f[0]["rule"] if f else "-", "evidence" in f[0] if f else False)
            r = await call("steps", path=store, first=0, count=5)
            s = payload(r)
            print("steps", is_error(r), s["total_steps"], len(s["steps"]), "slow" in s)
            r = await call("top", path=store, what="kernels", limit=3)
            print("top", is_error(r), len(payload(r)["kernels"]))
            r = await call("diff_runs", base=store, new=other)
            print("diff_runs", is_error(r), payload(r).get("schema", ""))
            r = await call("query", path=store, sql="SELECT COUNT(*) AS n FROM steps")
            q = payload(r)
            print("query", is_error(r), q["columns"], q["rows"])
            if packed:
                r = await call("query", path=packed, sql="SELECT COUNT(*) AS n, SUM(end_ns - start_ns) AS ns FROM kernels")
                q = payload(r) if not is_error(r) else {"columns": [], "rows": text(r)[:200]}
                print("query_packed", is_error(r), q["columns"], q["rows"])
            r = await call("query", path=store, sql="DELETE FROM steps")
            print("query_write", is_error(r), text(r)[:200].replace("\n", " "))
            r = await call("query", path=store, sql="ATTACH DATABASE '/tmp/x.db' AS x")
            print("query_attach", is_error(r), text(r)[:200].replace("\n", " "))
            r = await call("explain_rule", rule="input-bound")
            print("explain_rule", is_error(r), text(r).splitlines()[0] if text(r) else "")

    # The server started on its own where no stepscope executable can be found: a tool says why, not only "Error
    # executing tool" (the SDK passes a ToolError's message to the client and hides any other exception's).
    env = {k: v for k, v in os.environ.items() if k != "STEPSCOPE_CLI"}
    env["PATH"] = "/usr/bin:/bin"
    params = StdioServerParameters(command=sys.executable, args=["-m", "stepscope.mcp_server"], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            r = await session.call_tool("open_trace", {"path": store})
            print("no_cli", is_error(r), text(r)[:300].replace("\n", " "))


asyncio.run(main())
