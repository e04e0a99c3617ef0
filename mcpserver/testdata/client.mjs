// An agent on the official MCP TypeScript SDK: connects over Streamable HTTP with
// HTTP Basic, lists the tools and makes the calls it is given.
//
// Usage: node client.mjs CALLS_JSON   with MCP_URL, MCP_USER, MCP_PASSWORD and
// NODE_PATH holding @modelcontextprotocol/sdk. Prints one JSON line like client.py.
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH.split(":")[0] + "/");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const calls = JSON.parse(process.argv[2]);
const token = Buffer.from(`${process.env.MCP_USER}:${process.env.MCP_PASSWORD}`).toString("base64");
const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
  requestInit: { headers: { Authorization: `Basic ${token}` } },
});
const client = new Client({ name: "nlproxy-test", version: "1" });
await client.connect(transport);
const out = { sdk: "typescript", tools: [], calls: [] };
out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
for (const [tool, args] of calls) {
  const res = await client.callTool({ name: tool, arguments: args });
  out.calls.push({ tool, is_error: !!res.isError, text: res.content[0].text });
}
console.log(JSON.stringify(out));
await client.close();
