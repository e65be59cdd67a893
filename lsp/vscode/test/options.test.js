// The settings' mapping (src/options.ts, compiled to out/options.js by build.sh), under plain Node:
//   node --test lsp/vscode/test/options.test.js
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const { DEFAULTS, launch, serverOptions, statusView } = require("../out/options.js");

test("the server's options come from the settings, a bad maxTokens falls back", () => {
  const s = { ...DEFAULTS, maxTokens: 24, prewarm: false };
  assert.deepStrictEqual(serverOptions(s),
    { maxTokens: 24, lineBudgetMs: 1000, prewarm: false, prewarmAfterEnter: true, debounce: true, requestAhead: true });
  assert.strictEqual(serverOptions({ ...DEFAULTS, lineBudgetMs: null }).lineBudgetMs, null);
  assert.strictEqual(serverOptions({ ...DEFAULTS, lineBudgetMs: -5 }).lineBudgetMs, 1000);
  assert.strictEqual(serverOptions({ ...DEFAULTS, maxTokens: 0 }).maxTokens, 64);
  assert.strictEqual(serverOptions({ ...DEFAULTS, maxTokens: 1.5 }).maxTokens, 64);
});

test("the command line: specd lsp, extra args, in-process, a config file", () => {
  assert.deepStrictEqual(launch({ ...DEFAULTS }), { command: "specd", args: ["lsp"] });
  assert.deepStrictEqual(launch({ ...DEFAULTS, command: " ", args: ["--socket", "/s"], backend: "in-process" }),
    { command: "specd", args: ["lsp", "--socket", "/s", "--in-process"] });
  assert.deepStrictEqual(launch({ ...DEFAULTS, backend: "local", configFile: "/c.toml" }).args,
    ["lsp", "--config", "/c.toml"]);
  assert.throws(() => launch({ ...DEFAULTS, backend: "http://x" }), /specd.backend must be/);
});

test("a shared server: a config of its own, on a socket of its own", () => {
  const s = { ...DEFAULTS, backend: "openai:http://gpu:8000/v1", remoteModel: "qwen \"coder\"", configFile: "/ignored" };
  const a = launch(s, "/run/x");
  assert.strictEqual(a.args[0], "lsp");
  assert.deepStrictEqual(a.args.slice(1), ["--config", a.config.path]);
  assert.match(a.config.path, /^\/run\/x\/[0-9a-f]{12}\.toml$/);
  const socket = a.config.path.replace(/\.toml$/, ".sock");
  assert.strictEqual(a.config.text, [
    "# written by the specd VS Code extension (setting specd.backend); rewritten at each start",
    "[daemon]", 'backend = "openai:http://gpu:8000/v1"', `socket = "${socket}"`,
    'remote_model = "qwen \\"coder\\""', ""].join("\n"));
  const b = launch({ ...s, backend: "llama-server:http://gpu:8012" }, "/run/x");
  assert.notStrictEqual(b.config.path, a.config.path); // another server, another daemon
});

test("the status bar", () => {
  assert.match(statusView({ state: "ready" }, true, 212.4).text, /^\$\(check\) specd 212 ms$/);
  assert.match(statusView({ state: "loading" }, true, null).text, /sync~spin/);
  const degraded = statusView({ state: "degraded", message: "no daemon on /s" }, true, null);
  assert.match(degraded.text, /warning/);
  assert.match(degraded.tooltip, /no daemon on \/s/);
  assert.match(statusView({ state: "ready" }, false, 10).text, /circle-slash/);
});
