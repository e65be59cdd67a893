// What the extension's settings mean to `specd lsp`: its command line, its initializationOptions
// (and workspace/didChangeConfiguration settings), and what the status bar says. No `vscode`
// import here, so the tests run this module under plain Node.
import * as crypto from "crypto";
import * as os from "os";
import * as path from "path";

export interface Settings {
  enable: boolean;
  command: string;
  args: string[];
  languages: string[];
  maxTokens: number;
  lineBudgetMs: number | null;
  prewarm: boolean;
  prewarmAfterEnter: boolean;
  debounce: boolean;
  requestAhead: boolean;
  backend: string; // "" | "local" | "in-process" | "openai:URL" | "llama-server:URL"
  remoteModel: string;
  remoteTokenizer: string;
  configFile: string;
}

export const DEFAULTS: Settings = {
  enable: true,
  command: "specd",
  args: [],
  languages: ["python"],
  maxTokens: 64,
  lineBudgetMs: 1000,
  prewarm: true,
  prewarmAfterEnter: true,
  debounce: true,
  requestAhead: true,
  backend: "",
  remoteModel: "",
  remoteTokenizer: "",
  configFile: "",
};

/** The server's options (README, "Editors"): sent as initializationOptions and, when a setting
 * changes, as `workspace/didChangeConfiguration` settings under `specd`. */
export type ServerOptions = Pick<Settings, "maxTokens" | "lineBudgetMs" | "prewarm" | "prewarmAfterEnter" | "debounce" | "requestAhead"> & {
  statusNotifications?: boolean; // initializationOptions only: ask for `specd/status`
};

export function serverOptions(s: Settings): ServerOptions {
  const maxTokens = Number.isInteger(s.maxTokens) && s.maxTokens >= 1 && s.maxTokens <= 4096 ? s.maxTokens : DEFAULTS.maxTokens;
  const b = s.lineBudgetMs;
  const lineBudgetMs = b === null || (typeof b === "number" && Number.isFinite(b) && b >= 0) ? b : DEFAULTS.lineBudgetMs;
  return { maxTokens, lineBudgetMs, prewarm: !!s.prewarm, prewarmAfterEnter: !!s.prewarmAfterEnter, debounce: !!s.debounce,
    requestAhead: !!s.requestAhead };
}

/** How to start the server: the executable, its arguments, and a config file to write first
 * (a shared server: `[daemon] backend = ...` on a socket of the extension's own). */
export interface Launch {
  command: string;
  args: string[];
  config?: { path: string; text: string };
}

const REMOTE = /^(openai|llama-server):\S+$/;

export function isRemote(backend: string): boolean {
  return REMOTE.test(backend.trim());
}

function tomlString(value: string): string {
  return JSON.stringify(value); // a TOML basic string is a JSON string for what a URL or path holds
}

/** A directory for the extension's config files and daemon sockets: short (a Unix socket path
 * holds at most 107 bytes) and per user. */
export function runtimeDir(): string {
  const base = process.env.XDG_RUNTIME_DIR || os.tmpdir();
  const user = typeof process.getuid === "function" ? String(process.getuid()) : os.userInfo().username;
  return path.join(base, `specd-vscode-${user}`);
}

export function launch(s: Settings, dir: string = runtimeDir()): Launch {
  const command = s.command.trim() || DEFAULTS.command;
  const args = ["lsp", ...s.args];
  const backend = s.backend.trim();
  if (backend === "in-process") {
    args.push("--in-process");
  } else if (isRemote(backend)) {
    // `specd lsp --config FILE` reads the socket from FILE and starts `specd serve --config FILE`
    // when no daemon listens there: a daemon of this backend's own, beside any local one
    const key = crypto.createHash("sha256").update([backend, s.remoteModel, s.remoteTokenizer].join("\n")).digest("hex").slice(0, 12);
    const socket = path.join(dir, `${key}.sock`);
    const lines = ["# written by the specd VS Code extension (setting specd.backend); rewritten at each start",
                   "[daemon]", `backend = ${tomlString(backend)}`, `socket = ${tomlString(socket)}`];
    if (s.remoteModel.trim()) {
      lines.push(`remote_model = ${tomlString(s.remoteModel.trim())}`);
    }
    if (s.remoteTokenizer.trim()) {
      lines.push(`remote_tokenizer = ${tomlString(s.remoteTokenizer.trim())}`);
    }
    const config = { path: path.join(dir, `${key}.toml`), text: lines.join("\n") + "\n" };
    args.push("--config", config.path);
    return { command, args, config };
  } else if (backend !== "" && backend !== "local") {
    throw new Error(`specd.backend must be empty, "local", "in-process", "openai:URL" or "llama-server:URL", got ${JSON.stringify(backend)}`);
  }
  if (s.configFile.trim()) {
    args.push("--config", s.configFile.trim());
  }
  return { command, args };
}

/** The `specd/status` notification's parameters (lsp/server.py). */
export interface Status {
  state: "loading" | "ready" | "degraded";
  message?: string;
  latencyMs?: number | null;
}

export interface StatusView {
  text: string;
  tooltip: string;
}

export function statusView(status: Status | undefined, enabled: boolean, latencyMs: number | null): StatusView {
  const latency = latencyMs === null || latencyMs === undefined ? "" : ` ${Math.round(latencyMs)} ms`;
  if (!enabled) {
    return { text: "$(circle-slash) specd", tooltip: "specd: suggestions are off (click to turn them on)" };
  }
  const detail = status?.message ? `\n${status.message}` : "";
  switch (status?.state) {
    case "ready":
      return { text: `$(check) specd${latency}`, tooltip: `specd: ready${latency ? `; last suggestion in${latency}` : ""}${detail}\n(click to turn suggestions off)` };
    case "degraded":
      return { text: `$(warning) specd${latency}`, tooltip: `specd: degraded${detail}\n(details in the specd output; click to turn suggestions off)` };
    default:
      return { text: "$(sync~spin) specd", tooltip: `specd: loading models${detail}` };
  }
}
