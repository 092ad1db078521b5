// The official TypeScript MCP SDK client, driven by a plan: `node client.mjs PLAN.json` connects as the
// plan says (Streamable HTTP with a bearer token, or stdio), runs its steps in order, and prints one JSON
// object per step on stdout: {"ok": true, "result": ...} or {"ok": false, "error": {"code", "message"}}.
// The assertions live in tests/e2e/test_ts_client.py; this file only speaks MCP the way Inspector and
// Claude Code do (they are built on this SDK), so what it throws is what those clients throw.
// A string argument "$N.a.b" stands for field a.b of step N's result (e.g. an upload_id from kb_upload_start).
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema, CreateTaskResultSchema } from "@modelcontextprotocol/sdk/types.js";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));

function transportFor(spec) {
  if (spec.kind === "http") {
    const headers = spec.token ? { Authorization: `Bearer ${spec.token}` } : {};
    return new StreamableHTTPClientTransport(new URL(spec.url), { requestInit: { headers } });
  }
  return new StdioClientTransport({ command: spec.command, args: spec.args, env: spec.env, stderr: "ignore" });
}

const calls = {
  listTools: (c) => c.listTools(),
  callTool: (c, s) => c.callTool({ name: s.name, arguments: s.arguments }),
  listResources: (c, s) => c.listResources(s.cursor ? { cursor: s.cursor } : undefined),
  listResourceTemplates: (c) => c.listResourceTemplates(),
  readResource: (c, s) => c.readResource({ uri: s.uri }),
  listPrompts: (c) => c.listPrompts(),
  getPrompt: (c, s) => c.getPrompt({ name: s.name, arguments: s.arguments }),
  complete: (c, s) => c.complete({ ref: s.ref, argument: s.argument }),
  ping: (c) => c.ping(),
  // Tasks (2025-11-25, the SDK's experimental API) and progress: each records the progress notifications
  // its request received beside the result.
  createTask: (c, s) => c.request({ method: "tools/call", params: { name: s.name, arguments: s.arguments, task: { ttl: 60000 } } },
    CreateTaskResultSchema),
  getTask: (c, s) => c.experimental.tasks.getTask(s.taskId),
  cancelTask: (c, s) => c.experimental.tasks.cancelTask(s.taskId),
  taskResult: (c, s) => withProgress((onprogress) =>
    c.experimental.tasks.getTaskResult(s.taskId, CallToolResultSchema, { onprogress, timeout: 120000 })),
  callToolWithProgress: (c, s) => withProgress((onprogress) =>
    c.callTool({ name: s.name, arguments: s.arguments }, undefined, { onprogress, timeout: 120000 })),
  callToolStream: async (c, s) => {
    const seen = [];
    for await (const message of c.experimental.tasks.callToolStream({ name: s.name, arguments: s.arguments }, undefined,
      { task: { ttl: 60000 } })) {
      seen.push({ type: message.type, status: message.task?.status, result: message.result, error: message.error?.message });
    }
    return { messages: seen };
  },
};

async function withProgress(run) {
  const progress = [];
  const result = await run((p) => progress.push(p));
  return { ...result, progress };
}

const outputs = [];

function resolve(value) {
  if (typeof value === "string" && /^\$\d+\./.test(value)) {
    const [index, ...path] = value.slice(1).split(".");
    return path.reduce((found, key) => (found == null ? found : found[key]), outputs[Number(index)]?.result);
  }
  if (Array.isArray(value)) return value.map(resolve);
  if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolve(v)]));
  return value;
}

const client = new Client({ name: "kb-bridge-ts-tests", version: "1.0.0" });
await client.connect(transportFor(plan.transport));
for (const step of plan.steps) {
  let line;
  try {
    line = { ok: true, result: await calls[step.method](client, resolve(step)) };
  } catch (error) {
    line = { ok: false, error: { code: error.code ?? null, message: String(error.message ?? error) } };
  }
  outputs.push(line);
  process.stdout.write(JSON.stringify(line) + "\n");
}
await client.close();
