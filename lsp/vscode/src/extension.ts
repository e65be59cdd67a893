// specd for VS Code: starts `specd lsp` (stdio) with vscode-languageclient, shows its ghost text
// (LSP 3.18 textDocument/inlineCompletion), the daemon's state in the status bar, and two
// commands: toggle suggestions, restart. Errors go to the "specd" output channel, never to popups.
import * as fs from "fs";
import * as path from "path";
import * as vscode from "vscode";
import {
  CloseAction, DidChangeConfigurationNotification, ErrorAction, LanguageClient, LanguageClientOptions,
  RevealOutputChannelOn, ServerOptions, State,
} from "vscode-languageclient/node";
import { DEFAULTS, Settings, Status, launch, serverOptions, statusView } from "./options";

const SECTION = "specd";
const RESTART_ON = ["command", "args", "languages", "backend", "remoteModel", "remoteTokenizer", "configFile"];

let client: LanguageClient | undefined;
let output: vscode.OutputChannel;
let statusItem: vscode.StatusBarItem;
let status: Status | undefined;
let latencyMs: number | null = null;

function settings(): Settings {
  const c = vscode.workspace.getConfiguration(SECTION);
  const get = <K extends keyof Settings>(key: K): Settings[K] => c.get<Settings[K]>(key, DEFAULTS[key]) as Settings[K];
  return {
    enable: get("enable"), command: get("command"), args: get("args"), languages: get("languages"),
    maxTokens: get("maxTokens"), lineBudgetMs: get("lineBudgetMs"), prewarm: get("prewarm"),
    prewarmAfterEnter: get("prewarmAfterEnter"), debounce: get("debounce"),
    requestAhead: get("requestAhead"), backend: get("backend"),
    remoteModel: get("remoteModel"), remoteTokenizer: get("remoteTokenizer"), configFile: get("configFile"),
  };
}

function log(message: string): void {
  output.appendLine(`[${new Date().toISOString()}] ${message}`);
}

function showStatus(): void {
  const view = statusView(status, settings().enable, latencyMs);
  statusItem.text = view.text;
  statusItem.tooltip = view.tooltip;
  statusItem.show();
}

function setStatus(next: Status): void {
  status = next;
  if (typeof next.latencyMs === "number") {
    latencyMs = next.latencyMs;
  }
  showStatus();
}

/** The executable, as the server process will find it: an absolute or relative path as given, a
 * bare name on PATH. Undefined when it is not there (the reason goes to the output channel). */
function resolveCommand(command: string): string | undefined {
  if (command.includes("/") || command.includes("\\")) {
    return fs.existsSync(command) ? command : undefined;
  }
  const exts = process.platform === "win32" ? (process.env.PATHEXT || ".EXE;.CMD;.BAT").split(";") : [""];
  for (const dir of (process.env.PATH || "").split(path.delimiter)) {
    for (const ext of exts) {
      const candidate = path.join(dir, command + ext);
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        return candidate;
      } catch {
        // not here
      }
    }
  }
  return undefined;
}

/** vscode-languageclient shows some errors (a server that cannot start, one that keeps crashing)
 * as popups whatever `revealOutputChannelOn` says; specd's go to the output channel only. */
class QuietLanguageClient extends LanguageClient {
  constructor(id: string, name: string, server: ServerOptions, options: LanguageClientOptions) {
    super(id, name, server, options);
    (this as unknown as { showNotificationMessage: (type: unknown, message?: string) => void })
      .showNotificationMessage = () => undefined;
  }
}

async function start(context: vscode.ExtensionContext): Promise<void> {
  const s = settings();
  let how;
  try {
    how = launch(s);
  } catch (e) {
    log(`not started: ${(e as Error).message}`);
    setStatus({ state: "degraded", message: (e as Error).message });
    return;
  }
  const command = resolveCommand(how.command);
  if (command === undefined) {
    const message = `\`${how.command}\` is not on PATH (${process.env.PATH ?? ""}): install specd ` +
      "(pip install -e . in its checkout) or set specd.command to its full path";
    log(`not started: ${message}`);
    setStatus({ state: "degraded", message });
    return;
  }
  if (how.config) {
    fs.mkdirSync(path.dirname(how.config.path), { recursive: true, mode: 0o700 });
    fs.writeFileSync(how.config.path, how.config.text);
    log(`backend ${s.backend}: config ${how.config.path}`);
  }
  const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  // no `transport`: TransportKind.stdio would add a `--stdio` argument, which `specd lsp` does not take
  const server: ServerOptions = { command, args: how.args, options: { cwd } };
  const languages = s.languages.length ? s.languages : DEFAULTS.languages;
  const selector = languages.includes("*")
    ? [{ scheme: "file" }, { scheme: "untitled" }]
    : languages.flatMap((language) => [{ scheme: "file", language }, { scheme: "untitled", language }]);
  let crashes: number[] = [];
  const options: LanguageClientOptions = {
    documentSelector: selector,
    outputChannel: output,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    initializationOptions: { ...serverOptions(s), statusNotifications: true },
    initializationFailedHandler: (error) => {
      log(`the server did not initialize: ${error}`);
      setStatus({ state: "degraded", message: `the server did not initialize: ${error}` });
      return false;
    },
    errorHandler: {
      error: (error, _message, count) => {
        log(`connection error (${count ?? 0}): ${error}`);
        return { action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown, handled: true };
      },
      closed: () => {
        const now = Date.now();
        crashes = [...crashes.filter((t) => now - t < 180_000), now];
        if (crashes.length <= 4) {
          log("the server exited; restarting it");
          setStatus({ state: "loading", message: "restarting the server" });
          return { action: CloseAction.Restart, handled: true };
        }
        log("the server exited 5 times in 3 minutes; not restarting (command: specd: Restart the Daemon Connection)");
        setStatus({ state: "degraded", message: "the server keeps exiting; see the specd output" });
        return { action: CloseAction.DoNotRestart, handled: true };
      },
    },
    middleware: {
      // ghost text only: the server's completion item repeats the inline suggestion, and asking
      // for both would make each keystroke's two requests supersede each other
      provideCompletionItem: () => undefined,
      provideInlineCompletionItems: (document, position, ctx, token, next) => {
        if (!settings().enable) {
          return undefined;
        }
        return next(document, position, ctx, token);
      },
    },
  };
  const c = new QuietLanguageClient("specd", "specd", server, options);
  c.registerProposedFeatures(); // textDocument/inlineCompletion (LSP 3.18) is "proposed" in 9.x
  context.subscriptions.push(c.onNotification("specd/status", (params: Status) => setStatus(params)));
  context.subscriptions.push(c.onDidChangeState((e) => {
    if (e.newState === State.Starting) {
      setStatus({ state: "loading", message: "starting `specd lsp`" });
    } else if (e.newState === State.Stopped && status?.state !== "degraded") {
      setStatus({ state: "degraded", message: "the server is stopped" });
    }
  }));
  client = c;
  log(`starting: ${command} ${how.args.join(" ")}`);
  setStatus({ state: "loading", message: "starting `specd lsp`" });
  try {
    await c.start();
  } catch (e) {
    log(`the server did not start: ${e}`);
    setStatus({ state: "degraded", message: `the server did not start: ${e}` });
  }
}

async function stop(): Promise<void> {
  const c = client;
  client = undefined;
  if (c) {
    try {
      await c.stop(5000);
    } catch (e) {
      log(`stopping the server: ${e}`);
    }
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("specd");
  statusItem = vscode.window.createStatusBarItem("specd.status", vscode.StatusBarAlignment.Right, 100);
  statusItem.name = "specd";
  statusItem.command = "specd.toggle";
  context.subscriptions.push(output, statusItem);
  context.subscriptions.push(vscode.commands.registerCommand("specd.toggle", async () => {
    const c = vscode.workspace.getConfiguration(SECTION);
    await c.update("enable", !settings().enable, vscode.ConfigurationTarget.Global);
    showStatus();
  }));
  context.subscriptions.push(vscode.commands.registerCommand("specd.restart", async () => {
    log("restart asked for");
    await stop();
    latencyMs = null;
    await start(context);
  }));
  context.subscriptions.push(vscode.commands.registerCommand("specd.showOutput", () => output.show(true)));
  context.subscriptions.push(vscode.workspace.onDidChangeConfiguration(async (e) => {
    if (!e.affectsConfiguration(SECTION)) {
      return;
    }
    showStatus();
    if (RESTART_ON.some((key) => e.affectsConfiguration(`${SECTION}.${key}`))) {
      log("settings changed: restarting the server");
      await stop();
      latencyMs = null;
      await start(context);
    } else if (client?.isRunning()) {
      await client.sendNotification(DidChangeConfigurationNotification.type,
                                    { settings: { specd: serverOptions(settings()) } });
    }
  }));
  await start(context);
}

export async function deactivate(): Promise<void> {
  await stop();
}
